//! Server-sent events, as both providers stream them: an incremental parser fed with the
//! body's chunks in whatever sizes the network delivers (a line, an event or a UTF-8 character
//! may be split anywhere).

/// One dispatched event.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SseEvent {
    /// The `event:` field; `None` for the default `message` type (OpenAI sends none).
    pub event: Option<String>,
    /// The `data:` lines joined with `\n`.
    pub data: String,
}

/// A line longer than this ends the stream with an error instead of growing without bound.
pub const MAX_LINE_BYTES: usize = 16 << 20;

#[derive(Debug, Default)]
pub struct SseParser {
    line: Vec<u8>,
    /// The previous chunk ended with CR: a LF starting this one belongs to it.
    after_cr: bool,
    event: Option<String>,
    data: String,
    has_data: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SseError {
    #[error("a stream line is longer than {MAX_LINE_BYTES} bytes")]
    LineTooLong,
    #[error("the stream is not UTF-8")]
    NotUtf8,
}

impl SseParser {
    pub fn new() -> Self {
        Self::default()
    }

    /// Feed the next chunk; complete events go to `out`.
    pub fn feed(&mut self, chunk: &[u8], out: &mut Vec<SseEvent>) -> Result<(), SseError> {
        let mut rest = chunk;
        if self.after_cr {
            self.after_cr = false;
            if let Some(b'\n') = rest.first() {
                rest = &rest[1..];
            }
        }
        while let Some(pos) = rest.iter().position(|&b| b == b'\n' || b == b'\r') {
            self.push(&rest[..pos])?;
            let is_cr = rest[pos] == b'\r';
            rest = &rest[pos + 1..];
            if is_cr {
                match rest.first() {
                    Some(b'\n') => rest = &rest[1..],
                    None => self.after_cr = true,
                    Some(_) => {}
                }
            }
            let line = std::mem::take(&mut self.line);
            self.line_done(&line, out)?;
            self.line = line;
            self.line.clear();
        }
        self.push(rest)
    }

    /// The stream ended: an event without its closing blank line is still delivered (some
    /// servers close right after the last `data:` line).
    pub fn finish(&mut self, out: &mut Vec<SseEvent>) -> Result<(), SseError> {
        if !self.line.is_empty() {
            let line = std::mem::take(&mut self.line);
            self.line_done(&line, out)?;
        }
        self.dispatch(out);
        Ok(())
    }

    fn push(&mut self, bytes: &[u8]) -> Result<(), SseError> {
        if self.line.len() + bytes.len() > MAX_LINE_BYTES {
            return Err(SseError::LineTooLong);
        }
        self.line.extend_from_slice(bytes);
        Ok(())
    }

    fn line_done(&mut self, line: &[u8], out: &mut Vec<SseEvent>) -> Result<(), SseError> {
        if line.is_empty() {
            self.dispatch(out);
            return Ok(());
        }
        let line = std::str::from_utf8(line).map_err(|_| SseError::NotUtf8)?;
        if line.starts_with(':') {
            return Ok(()); // a comment (keep-alive)
        }
        let (field, value) = match line.find(':') {
            Some(i) => {
                let v = &line[i + 1..];
                (&line[..i], v.strip_prefix(' ').unwrap_or(v))
            }
            None => (line, ""),
        };
        match field {
            "event" => self.event = Some(value.to_owned()),
            "data" => {
                if self.has_data {
                    self.data.push('\n');
                }
                self.data.push_str(value);
                self.has_data = true;
            }
            _ => {} // id, retry and unknown fields mean nothing to a one-shot stream
        }
        Ok(())
    }

    fn dispatch(&mut self, out: &mut Vec<SseEvent>) {
        if self.has_data {
            out.push(SseEvent {
                event: self.event.take(),
                data: std::mem::take(&mut self.data),
            });
        }
        self.event = None;
        self.has_data = false;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_in_pieces(input: &[u8], piece: usize) -> Vec<SseEvent> {
        let mut p = SseParser::new();
        let mut out = Vec::new();
        for chunk in input.chunks(piece) {
            p.feed(chunk, &mut out).expect("feed");
        }
        p.finish(&mut out).expect("finish");
        out
    }

    #[test]
    fn events_survive_any_split_and_any_line_ending() {
        let text = "event: a\ndata: {\"x\":\"é\"}\n\n: ping\n\ndata: one\ndata: two\n\nevent: b\ndata:no-space\n\n";
        let want = vec![
            SseEvent {
                event: Some("a".into()),
                data: "{\"x\":\"é\"}".into(),
            },
            SseEvent {
                event: None,
                data: "one\ntwo".into(),
            },
            SseEvent {
                event: Some("b".into()),
                data: "no-space".into(),
            },
        ];
        for ending in ["\n", "\r\n", "\r"] {
            let input = text.replace('\n', ending);
            for piece in 1..input.len() {
                assert_eq!(
                    parse_in_pieces(input.as_bytes(), piece),
                    want,
                    "{ending:?} {piece}"
                );
            }
        }
    }

    #[test]
    fn a_last_event_without_its_blank_line_is_delivered() {
        assert_eq!(
            parse_in_pieces(b"data: [DONE]", 5),
            vec![SseEvent {
                event: None,
                data: "[DONE]".into()
            }]
        );
    }

    #[test]
    fn an_event_field_without_data_dispatches_nothing() {
        assert!(parse_in_pieces(b"event: ping\n\n", 3).is_empty());
    }

    #[test]
    fn bad_bytes_and_endless_lines_are_errors() {
        let mut p = SseParser::new();
        let mut out = Vec::new();
        assert_eq!(p.feed(b"data: \xff\n", &mut out), Err(SseError::NotUtf8));
        let mut p = SseParser::new();
        let big = vec![b'a'; MAX_LINE_BYTES + 1];
        assert_eq!(p.feed(&big, &mut out), Err(SseError::LineTooLong));
    }
}
