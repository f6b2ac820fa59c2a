"""Score extractions of trafilatura's evaluation corpus with the corpus's own scoring code.

Run by servers/web/benches/extract/public.rs (`cargo bench -p kitbag-web --bench extract`):
    score_trafilatura_eval.py TESTS_DIR OUTPUTS_JSON
TESTS_DIR is the `tests` directory of a trafilatura clone (its evaldata.json and
eval_common.py); OUTPUTS_JSON maps each extractor's name to {url: extracted text}. Each text is
scored by eval_common.count_item (whitespace-normalized substring matching of the annotated
"with" and "without" segments) and summed in eval_common.ConfusionMatrix, as evaluate.py does;
prints one tab-separated line per extractor: name, precision, recall, accuracy, F1, pages.
"""
import json
import sys

tests_dir, outputs_path = sys.argv[1], sys.argv[2]
sys.path.insert(0, tests_dir)
from eval_common import ConfusionMatrix, count_item, load_evaldata  # noqa: E402

evaldata = load_evaldata(tests_dir)
with open(outputs_path, encoding="utf-8") as f:
    outputs = json.load(f)
for name, texts in outputs.items():
    matrix = ConfusionMatrix()
    for url, item in evaldata.items():
        matrix.add(count_item(item, texts.get(url)))
    precision, recall, accuracy, f1 = matrix.scores()
    print(f"{name}\t{precision:.3f}\t{recall:.3f}\t{accuracy:.3f}\t{f1:.3f}\t{len(texts)}")

# The same scores by the page's language, guessed from its annotated main-text segments by
# their most frequent function words (the corpus records no language).
FUNCTION_WORDS = {
    "de": "der die und das ist nicht mit sich auch den von zu ein eine für auf dem des im",
    "en": "the and of to is in that for with it on as are this was be by you have",
    "fr": "le la les et des est une un que pour pas dans du sur qui au ce avec plus",
    "es": "el la los las y que en del por con una para es se lo como más su al",
    "pl": "i w na się z do nie że to jest jak o po od za przez ale dla tak",
}


def language(item):
    words = " ".join(item["with"]).lower().split()
    counts = {lang: sum(w in set(fw.split()) for w in words) for lang, fw in FUNCTION_WORDS.items()}
    best = max(counts, key=counts.get)
    return best if counts[best] >= 2 else "other"


langs = {url: language(item) for url, item in evaldata.items()}
names = sorted(set(langs.values()), key=lambda l: -list(langs.values()).count(l))
print("by language (pages): " + ", ".join(f"{l} {list(langs.values()).count(l)}" for l in names))
print(f"{'F1 by language':<18} " + " ".join(f"{l:>6}" for l in names))
for name, texts in outputs.items():
    cells = []
    for lang in names:
        matrix = ConfusionMatrix()
        for url, item in evaldata.items():
            if langs[url] == lang:
                matrix.add(count_item(item, texts.get(url)))
        cells.append(f"{matrix.f1():>6.3f}")
    print(f"{name:<18} " + " ".join(cells))
