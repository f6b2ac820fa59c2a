//! The words main-content finding reads: tags that are never content or only boilerplate,
//! class/id fragments that mark boilerplate or content, ARIA roles of boilerplate, and the tags
//! that start a block. [`super::content`] applies them.

/// Subtrees that are never content.
pub(crate) const HARD_DROP: &[&str] = &[
    "script",
    "style",
    "noscript",
    "template",
    "iframe",
    "svg",
    "canvas",
    "button",
    "dialog",
    "figcaption",
    "img",
    "picture",
    "select",
    "input",
    "textarea",
    "object",
    "embed",
    "link",
    "meta",
    "head",
    // Ruby annotations (furigana over Japanese text): the reading of the base text, which
    // inline would split every annotated word in two.
    "rt",
    "rp",
];

/// Subtrees that are boilerplate unless they hold the page's text (see
/// [`super::boilerplate::strip_soft`]).
pub(crate) const SOFT_DROP: &[&str] = &["nav", "footer", "aside", "header", "form", "menu"];

/// Class/id fragments of boilerplate blocks.
pub(crate) const DROP_MARKERS: &[&str] = &[
    "cookie",
    "consent",
    "gdpr",
    "banner",
    "advert",
    "ads-",
    "-ads",
    "promo",
    "newsletter",
    "subscribe",
    "share",
    "social",
    "messenger",
    "popup",
    "modal",
    "sidebar",
    "breadcrumb",
    "crumbs",
    "navbar",
    "menu",
    "related",
    "skip-link",
    "masthead",
    "footer",
    "trending",
    "right-rail",
    "more-videos",
    "more-topics",
    "jumpbox",
    "caption",
    "byline",
    "popular",
    "gallery",
    "slideshow",
    "carousel",
    "print-header",
    "print-only",
    "timestamp",
    "feedback",
    "signature",
    "postprofile",
    "author",
    "disclaimer",
    "copyright",
    "legend",
];

/// Class/id fragments of readers' comment sections and forms, which may outweigh the article
/// they follow: their size is no reason to keep them (see [`super::boilerplate::strip_soft`]).
pub(crate) const COMMENT_MARKERS: &[&str] = &[
    "comments",
    "commentlist",
    "comment-list",
    "comment_list",
    "comment-form",
    "comment_form",
    "commentform",
];

/// Class/id fragments of blocks that follow an article rather than being it — readers'
/// replies and teasers — for choosing between two candidates (`commentary`, an opinion piece,
/// is not one: it is taken out before matching).
pub(crate) const REPLY_MARKERS: &[&str] = &[
    "comment",
    "forum",
    "community",
    "reply",
    "replies",
    "discuss",
    "teaser",
];

/// Of [`DROP_MARKERS`], those of consent banners and dialogs over the page: a long privacy
/// notice or a login box is still no content, however much of the page's text it holds.
pub(crate) const DIALOG_MARKERS: &[&str] = &["cookie", "consent", "gdpr", "modal", "popup"];

/// Of [`DROP_MARKERS`], those that say where a block sits rather than what it is.
pub(crate) const POSITION_MARKERS: &[&str] = &["sidebar", "right-rail"];

/// Of [`DROP_MARKERS`], those a theme puts on the box that gets something attached to it:
/// share buttons, a lightbox for its pictures (`js-lightbox-gallery` on a text block).
pub(crate) const ATTACHED_MARKERS: &[&str] = &["share", "social", "gallery"];

pub(crate) const DROP_ROLES: &[&str] = &[
    "navigation",
    "banner",
    "contentinfo",
    "complementary",
    "dialog",
    "alertdialog",
    "search",
    "menu",
    "menubar",
];

/// Class/id fragments that mark content.
pub(crate) const POSITIVE: &[&str] = &[
    "article",
    "body",
    "content",
    "entry",
    "hentry",
    "h-entry",
    "main",
    "page",
    "post",
    "text",
    "blog",
    "story",
    "prose",
    "markdown",
    "cooked",
    "document",
    "description",
];

/// Class/id fragments that mark boilerplate (scoring only; see [`DROP_MARKERS`] for removal).
pub(crate) const NEGATIVE: &[&str] = &[
    "hidden",
    "banner",
    "combx",
    "comment",
    "com-",
    "contact",
    "foot",
    "masthead",
    "media",
    "meta",
    "outbrain",
    "promo",
    "related",
    "scroll",
    "share",
    "shoutbox",
    "sidebar",
    "skyscraper",
    "sponsor",
    "shopping",
    "tags",
    "tool",
    "widget",
    "nav",
    "menu",
    "breadcrumb",
    "rail",
    "trending",
    "teaser",
    "social",
    "card",
    "carousel",
    "recommend",
    "byline",
    "profile",
    "signature",
];

/// Elements that start a new block: a `div` without any of these below it reads as a paragraph.
pub(crate) const BLOCKS: &[&str] = &[
    "address",
    "article",
    "aside",
    "blockquote",
    "dd",
    "div",
    "dl",
    "dt",
    "figure",
    "footer",
    "form",
    "h1",
    "h2",
    "h3",
    "h4",
    "h5",
    "h6",
    "header",
    "hr",
    "li",
    "main",
    "nav",
    "ol",
    "p",
    "pre",
    "section",
    "table",
    "ul",
];

/// Whole lines that only label a widget (see [`super::labels`]), lower-case: ad slots, print,
/// share and comment buttons, "read more" and "see also" links, tag lists' headings, in the
/// languages of the pages kitbag is measured on (English, German, French, Spanish, Italian,
/// Polish). "Print" alone is not one: it is also a word of a heading.
pub(crate) const LABEL_LINES: &[&str] = &[
    // Ad slots.
    "advertisement",
    "anzeige",
    "werbung",
    "publicité",
    "publicidad",
    "pubblicità",
    "reklama",
    "sponsored",
    "gesponsert",
    // Read on.
    "read more",
    "see also",
    "related",
    "related articles",
    "related posts",
    "mehr zum thema",
    "lesen sie auch",
    "weiterlesen",
    "mehr lesen",
    "auch interessant",
    "ähnliche beiträge",
    "ähnliche artikel",
    "das könnte sie auch interessieren",
    "voir aussi",
    "lire aussi",
    "à lire aussi",
    "lee también",
    "ver también",
    "leggi anche",
    "zobacz również",
    "zobacz także",
    "czytaj także",
    "czytaj też",
    "zum weiterlesen",
    "verwandte artikel",
    "verwandte beiträge",
    "you may also like",
    "you might also like",
    "more stories",
    "à lire également",
    "te puede interesar",
    // Lists of the site's other pages.
    "latest news",
    "latest articles",
    "latest posts",
    "recent posts",
    "most read",
    "most popular",
    "neueste artikel",
    "neueste beiträge",
    "neue artikel",
    "aktuelle artikel",
    "aktuelle beiträge",
    "aktuellste beiträge",
    "aktuelle news",
    "meistgelesen",
    "meistgelesene artikel",
    "les plus lus",
    "lo más leído",
    "najczęściej czytane",
    // Print and share buttons.
    "print this article",
    "drucken",
    "rezept drucken",
    "artikel drucken",
    "seite drucken",
    "imprimer",
    "imprimir",
    "stampa",
    "drukuj",
    "share",
    "share this",
    "share this article",
    "teilen",
    "artikel teilen",
    "partager",
    "compartir",
    "condividi",
    "udostępnij",
    // Comment, author and tag widgets.
    "permalink",
    "permalien",
    "about the author",
    "über den autor",
    "à propos de l'auteur",
    "sobre el autor",
    "o autorze",
    "comments",
    "leave a reply",
    "leave a comment",
    "kommentare",
    "kommentar schreiben",
    "kommentare schreiben",
    "tags",
    "schlagwörter",
    "schlagworte",
    "kategorien",
    "etiquetas",
    "tagi",
    // Rating widgets.
    "was this article helpful",
    "was this helpful",
    "rate this article",
    "no ratings yet",
    "war der artikel nützlich",
    "war dieser artikel hilfreich",
    "artikel bewerten",
    "hier können sie den artikel bewerten",
    "noch keine bewertungen",
    "sterne anklicken zum bewerten",
    "cet article vous a-t-il été utile",
    "¿te ha resultado útil este artículo",
    "czy ten artykuł był pomocny",
    // An embed's consent placeholder.
    "external content",
    "externer inhalt",
    // Subscription boxes and page navigation.
    "newsletter",
    "subscribe",
    "zum newsletter anmelden",
    "back to top",
    "nach oben",
    "back to overview",
    "back to list",
    "zurück zur übersicht",
    "zurück zur listenansicht",
    "retour à la liste",
    "volver al listado",
    // A toggle's label.
    "quellen ausblenden",
    "show sources",
];

/// How a picture's credit line starts (see [`super::labels::is_credit`]), lower-case: a word
/// needs a colon (or `©`, `/`) after it, an abbreviation (`fot.`) or `©` nothing.
pub(crate) const CREDIT_LABELS: &[&str] = &[
    "foto",
    "fotos",
    "bild",
    "bilder",
    "bildquelle",
    "titelbild",
    "photo",
    "photos",
    "image",
    "images",
    "image credit",
    "featured image",
    "crédit photo",
    "zdjęcie",
    "fot.",
    "©",
    "copyright",
];

/// Picture agencies and libraries whose name ends a credit line, lower-case.
pub(crate) const PICTURE_AGENCIES: &[&str] = &[
    "getty images",
    "shutterstock",
    "istock",
    "istockphoto",
    "imago",
    "picture alliance",
    "picture-alliance",
    "dpa",
    "afp",
    "reuters",
    "ap photo",
    "wenn.com",
    "unsplash",
    "pixabay",
    "pexels",
    "adobe stock",
    "fotolia",
];

/// Labels of a post's tag or category line ("Tags: a, b" — see `labels::is_tag_list`),
/// lower-case.
pub(crate) const TAG_LABELS: &[&str] = &[
    "tags",
    "tag",
    "kategorie",
    "kategorien",
    "category",
    "categories",
    "filed under",
    "posted in",
    "schlagwörter",
    "schlagworte",
    "stichwörter",
    "themen",
    "tagi",
    "kategorie wpisu",
    "etiquetas",
    "categorías",
    "catégories",
    "mots-clés",
];

/// Labels of a reading-time line, lower-case.
pub(crate) const READING_LABELS: &[&str] = &[
    "lesezeit",
    "lesedauer",
    "reading time",
    "read time",
    "temps de lecture",
    "tiempo de lectura",
    "tempo di lettura",
    "czas czytania",
];

/// Units of a reading-time line (a trailing dot ignored), lower-case.
pub(crate) const READING_UNITS: &[&str] = &[
    "min", "mins", "minute", "minutes", "minuten", "minut", "minuty", "minutos", "minuti",
];

/// What follows the minutes in a reading-time line, lower-case.
pub(crate) const READING_SUFFIXES: &[&str] = &[
    "read",
    "reading",
    "lesezeit",
    "lesedauer",
    "de lecture",
    "de lectura",
    "di lettura",
    "czytania",
];
