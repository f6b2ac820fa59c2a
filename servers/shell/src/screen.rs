//! The terminal as a person at it would see it: a command's output run through a VT100
//! emulator, so that cursor movement, clears and redrawn progress bars end up as the text they
//! leave on the screen — what `shell_output` and `shell_input` show, and where a prompt is.

use std::num::NonZeroU16;

/// The screen of one command's terminal.
pub struct Screen {
    parser: vt100::Parser,
}

/// Bounds of a terminal size, so that a resize cannot make the emulator allocate without end.
pub const ROWS: std::ops::RangeInclusive<u16> = 2..=500;
pub const COLS: std::ops::RangeInclusive<u16> = 10..=1000;

fn dim(n: u16, range: &std::ops::RangeInclusive<u16>) -> NonZeroU16 {
    NonZeroU16::new(n.clamp(*range.start(), *range.end())).unwrap_or(NonZeroU16::MIN)
}

impl Screen {
    pub fn new(rows: u16, cols: u16) -> Screen {
        Screen {
            parser: vt100::Parser::new(dim(rows, &ROWS), dim(cols, &COLS), 0),
        }
    }

    pub fn feed(&mut self, bytes: &[u8]) {
        self.parser.process(bytes);
    }

    pub fn resize(&mut self, rows: u16, cols: u16) {
        self.parser.set_size(dim(rows, &ROWS), dim(cols, &COLS));
    }

    /// The visible rows from the first to the last one holding text, trailing spaces cut.
    pub fn text(&self) -> String {
        let screen = self.parser.screen();
        let (_, cols) = screen.size();
        let rows: Vec<String> = screen
            .rows(0, cols.get())
            .map(|r| r.trim_end().to_string())
            .collect();
        let last = rows
            .iter()
            .rposition(|r| !r.is_empty())
            .map_or(0, |i| i + 1);
        let first = rows[..last]
            .iter()
            .position(|r| !r.is_empty())
            .unwrap_or(last);
        rows[first..last].join("\n")
    }

    /// Whether the program asked for application cursor keys (arrows as `ESC O A`, not
    /// `ESC [ A`), as full-screen programs do.
    pub fn application_cursor(&self) -> bool {
        self.parser.screen().application_cursor()
    }

    /// The row the cursor is on: where a program waiting for input put its prompt.
    pub fn cursor_line(&self) -> String {
        let screen = self.parser.screen();
        let (_, cols) = screen.size();
        let row = usize::from(screen.cursor_position().0);
        screen
            .rows(0, cols.get())
            .nth(row)
            .map(|r| r.trim_end().to_string())
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redraws_and_clears_leave_what_a_terminal_shows() {
        let mut s = Screen::new(5, 40);
        // A progress bar redrawn with CR, a line erased, the cursor moved up and overwritten.
        s.feed(b"step 1\r\n 10%\r 50%\r100%\r\nnoise\x1b[2K\rclean\r\n");
        s.feed(b"old\x1b[1A\r\x1b[2Knew\x1b[1B\r\n");
        s.feed(b"Password: ");
        assert_eq!(s.text(), "step 1\n100%\nnew\nold\nPassword:");
        assert_eq!(s.cursor_line(), "Password:");
    }

    #[test]
    fn a_full_clear_and_a_resize_keep_the_screen_consistent() {
        let mut s = Screen::new(3, 20);
        s.feed(b"a\r\nb\r\nc\r\nd\r\n");
        assert_eq!(s.text(), "c\nd", "scrolled: the last rows stay");
        s.feed(b"\x1b[2J\x1b[Hfresh");
        assert_eq!(s.text(), "fresh");
        s.resize(0, 0);
        s.resize(u16::MAX, u16::MAX);
        s.feed(b"!");
        assert!(s.text().starts_with("fresh!"), "{:?}", s.text());
    }
}
