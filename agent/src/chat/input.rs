//! Lines for `kitbag chat`: from a pipe as they come, or from a terminal through rustyline
//! (line editing and history recall) on a thread of its own, so the chat's signals and turns
//! stay on the runtime.

use std::sync::mpsc;

use rustyline::config::{Behavior, Config};
use rustyline::error::ReadlineError;
use tokio::io::{BufReader, Lines as TokioLines, Stdin};

/// History entries kept (the session's prompts seed it).
const HISTORY: usize = 1000;

pub enum Input {
    Line(String),
    /// Ctrl-C while editing a line.
    Interrupted,
    /// Ctrl-D, or the end of the input.
    Eof,
}

pub enum Lines {
    Piped(TokioLines<BufReader<Stdin>>),
    Terminal(Terminal),
}

impl Lines {
    pub fn piped(lines: TokioLines<BufReader<Stdin>>) -> Self {
        Self::Piped(lines)
    }

    /// A line editor on the controlling terminal, its history seeded with `history`.
    pub fn terminal(history: Vec<String>) -> anyhow::Result<Self> {
        Ok(Self::Terminal(Terminal::start(history)?))
    }

    /// The next line. Cancel-safe: a line typed while the caller was elsewhere is kept.
    pub async fn next(&mut self) -> anyhow::Result<Input> {
        match self {
            Self::Piped(l) => Ok(match l.next_line().await? {
                Some(line) => Input::Line(line),
                None => Input::Eof,
            }),
            Self::Terminal(t) => t.next().await,
        }
    }
}

/// rustyline on its own thread: asked for one line at a time, so the terminal is in raw mode
/// only while a line is being edited (during a turn Ctrl-C is the terminal's SIGINT, which
/// cancels the turn).
pub struct Terminal {
    ask: mpsc::Sender<()>,
    answers: tokio::sync::mpsc::UnboundedReceiver<anyhow::Result<Input>>,
    /// Whether a line has been asked for and not yet answered.
    pending: bool,
    /// The terminal's settings at start, put back when the chat ends — also when it ends while
    /// the editor holds the terminal in raw mode (SIGTERM).
    saved: Option<nix::sys::termios::Termios>,
}

impl Terminal {
    fn start(history: Vec<String>) -> anyhow::Result<Self> {
        let config = Config::builder()
            .behavior(Behavior::PreferTerm)
            .max_history_size(HISTORY)?
            .history_ignore_dups(true)?
            .auto_add_history(false)
            .build();
        let mut editor = rustyline::DefaultEditor::with_config(config)?;
        for line in history.iter().rev().take(HISTORY).rev() {
            let _ = editor.add_history_entry(line.as_str());
        }
        let saved = nix::sys::termios::tcgetattr(std::io::stdin()).ok();
        let (ask, asked) = mpsc::channel::<()>();
        let (answer, answers) = tokio::sync::mpsc::unbounded_channel();
        std::thread::Builder::new()
            .name("chat-input".into())
            .spawn(move || {
                while asked.recv().is_ok() {
                    let input = match editor.readline("> ") {
                        Ok(line) => {
                            if !line.trim().is_empty() {
                                let _ = editor.add_history_entry(line.as_str());
                            }
                            Ok(Input::Line(line))
                        }
                        Err(ReadlineError::Interrupted) => Ok(Input::Interrupted),
                        Err(ReadlineError::Eof) => Ok(Input::Eof),
                        Err(e) => Err(anyhow::anyhow!("reading the terminal: {e}")),
                    };
                    if answer.send(input).is_err() {
                        break;
                    }
                }
            })?;
        Ok(Self {
            ask,
            answers,
            pending: false,
            saved,
        })
    }

    async fn next(&mut self) -> anyhow::Result<Input> {
        if !self.pending {
            self.ask
                .send(())
                .map_err(|_| anyhow::anyhow!("the line editor stopped"))?;
            self.pending = true;
        }
        let input = self.answers.recv().await.unwrap_or_else(|| Ok(Input::Eof));
        self.pending = false;
        input
    }
}

impl Drop for Terminal {
    fn drop(&mut self) {
        if let Some(t) = &self.saved {
            let _ = nix::sys::termios::tcsetattr(
                std::io::stdin(),
                nix::sys::termios::SetArg::TCSANOW,
                t,
            );
        }
    }
}
