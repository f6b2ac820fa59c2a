//! SPDY/3.1 framing, as kubectl's `port-forward` speaks it (client-go through
//! moby/spdystream): the eight control frames, DATA frames, and name/value header blocks
//! compressed with zlib and SPDY/3's fixed dictionary — one compression stream per
//! direction for the whole session, each block ended with a sync flush.
//!
//! Written from the SPDY/3.1 draft (frame layouts, status codes, the dictionary's words);
//! [`dictionary`]'s Adler-32 is checked against the DICTID a zlib stream names.
//!
//! Frame layout: a control frame starts with the control bit, the version (3) and the type,
//! then 8 bits of flags and a 24-bit length; a DATA frame starts with a 31-bit stream id,
//! then flags (FIN = 1) and the length.

use std::sync::OnceLock;

use bytes::Bytes;
use flate2::{Compress, Compression, Decompress, FlushCompress, FlushDecompress, Status};
use tokio::io::{AsyncRead, AsyncReadExt};

pub const VERSION: u16 = 3;
pub const FLAG_FIN: u8 = 0x01;
pub const FLAG_UNIDIRECTIONAL: u8 = 0x02;
/// Both windows (a stream's and, in 3.1, the session's) start at 64 KiB.
pub const INITIAL_WINDOW: i64 = 64 * 1024;
/// SETTINGS id of the initial window size for new streams.
pub const SETTINGS_INITIAL_WINDOW_SIZE: u32 = 7;

/// RST_STREAM status codes.
pub mod rst {
    pub const PROTOCOL_ERROR: u32 = 1;
    pub const INVALID_STREAM: u32 = 2;
    pub const REFUSED_STREAM: u32 = 3;
    pub const CANCEL: u32 = 5;
    pub const INTERNAL_ERROR: u32 = 6;
    pub const FLOW_CONTROL_ERROR: u32 = 7;
    pub const STREAM_IN_USE: u32 = 8;
}

/// GOAWAY status codes.
pub mod goaway {
    pub const OK: u32 = 0;
    pub const PROTOCOL_ERROR: u32 = 1;
    pub const INTERNAL_ERROR: u32 = 2;
}

const SYN_STREAM: u16 = 1;
const SYN_REPLY: u16 = 2;
const RST_STREAM: u16 = 3;
const SETTINGS: u16 = 4;
const PING: u16 = 6;
const GOAWAY: u16 = 7;
const HEADERS: u16 = 8;
const WINDOW_UPDATE: u16 = 9;

/// The largest header block accepted once decompressed.
const MAX_HEADER_BLOCK: usize = 1 << 20;

/// Name/value pairs; several values of one name are joined by NUL, as on the wire.
pub type Headers = Vec<(String, String)>;

/// The first value of `name` (names are lowercase on the wire).
pub fn header<'a>(h: &'a Headers, name: &str) -> Option<&'a str> {
    h.iter()
        .find(|(n, _)| n == name)
        .map(|(_, v)| v.split('\0').next().unwrap_or_default())
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame {
    SynStream {
        stream: u32,
        associated: u32,
        priority: u8,
        flags: u8,
        headers: Headers,
    },
    SynReply {
        stream: u32,
        fin: bool,
        headers: Headers,
    },
    RstStream {
        stream: u32,
        status: u32,
    },
    /// `(flags, id, value)` entries.
    Settings {
        flags: u8,
        entries: Vec<(u8, u32, u32)>,
    },
    Ping {
        id: u32,
    },
    GoAway {
        last_good: u32,
        status: u32,
    },
    Headers {
        stream: u32,
        fin: bool,
        headers: Headers,
    },
    WindowUpdate {
        stream: u32,
        delta: u32,
    },
    Data {
        stream: u32,
        fin: bool,
        data: Bytes,
    },
    /// A control frame type SPDY/3 does not define: ignored, as the draft says.
    Unknown {
        kind: u16,
    },
}

impl Frame {
    /// A short name for counters and logs.
    pub fn name(&self) -> &'static str {
        match self {
            Frame::SynStream { .. } => "SYN_STREAM",
            Frame::SynReply { .. } => "SYN_REPLY",
            Frame::RstStream { .. } => "RST_STREAM",
            Frame::Settings { .. } => "SETTINGS",
            Frame::Ping { .. } => "PING",
            Frame::GoAway { .. } => "GOAWAY",
            Frame::Headers { .. } => "HEADERS",
            Frame::WindowUpdate { .. } => "WINDOW_UPDATE",
            Frame::Data { .. } => "DATA",
            Frame::Unknown { .. } => "UNKNOWN",
        }
    }
}

/// Why a session cannot go on.
#[derive(Debug)]
pub enum Error {
    Io(std::io::Error),
    /// The peer broke the protocol: the session ends with GOAWAY PROTOCOL_ERROR.
    Protocol(String),
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Error::Io(e) => write!(f, "{e}"),
            Error::Protocol(m) => write!(f, "SPDY protocol error: {m}"),
        }
    }
}

fn protocol(m: impl Into<String>) -> Error {
    Error::Protocol(m.into())
}

/// The SPDY/3 header dictionary: 65 words, each after its length (32 bits, big-endian),
/// then a run of status codes, reason phrases, dates and content types.
pub fn dictionary() -> &'static [u8] {
    static DICT: OnceLock<Vec<u8>> = OnceLock::new();
    DICT.get_or_init(|| {
        const WORDS: &str = "options head post put delete trace accept accept-charset \
            accept-encoding accept-language accept-ranges age allow authorization cache-control \
            connection content-base content-encoding content-language content-length \
            content-location content-md5 content-range content-type date etag expect expires \
            from host if-match if-modified-since if-none-match if-range if-unmodified-since \
            last-modified location max-forwards pragma proxy-authenticate proxy-authorization \
            range referer retry-after server te trailer transfer-encoding upgrade user-agent \
            vary via warning www-authenticate method get status 200|OK version HTTP/1.1 url \
            public set-cookie keep-alive origin";
        const TAIL: &str = "100101201202205206300302303304305306307402405406407408409410411\
            412413414415416417502504505203 Non-Authoritative Information204 No Content301 Moved \
            Permanently400 Bad Request401 Unauthorized403 Forbidden404 Not Found500 Internal \
            Server Error501 Not Implemented503 Service UnavailableJan Feb Mar Apr May Jun Jul \
            Aug Sept Oct Nov Dec 00:00:00 Mon, Tue, Wed, Thu, Fri, Sat, Sun, GMTchunked,\
            text/html,image/png,image/jpg,image/gif,application/xml,application/xhtml+xml,\
            text/plain,text/javascript,publicprivatemax-age=gzip,deflate,sdchcharset=utf-8\
            charset=iso-8859-1,utf-,*,enq=0.";
        let mut d = Vec::with_capacity(1423);
        for w in WORDS.split_whitespace() {
            // "200 OK" is the one word with a space.
            let w = w.replace('|', " ");
            d.extend_from_slice(&(w.len() as u32).to_be_bytes());
            d.extend_from_slice(w.as_bytes());
        }
        d.extend_from_slice(TAIL.as_bytes());
        d
    })
}

/// The compressing side of a session's header blocks.
pub struct HeaderCompressor(Compress);

impl HeaderCompressor {
    pub fn new() -> HeaderCompressor {
        let mut c = Compress::new(Compression::default(), true);
        c.set_dictionary(dictionary())
            .expect("zlib accepts a dictionary before the first byte");
        HeaderCompressor(c)
    }

    fn compress(&mut self, block: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(block.len() + 64);
        let mut pos = 0;
        loop {
            let before = self.0.total_in();
            self.0
                .compress_vec(&block[pos..], &mut out, FlushCompress::Sync)
                .expect("deflate of an in-memory block");
            pos += (self.0.total_in() - before) as usize;
            // A sync flush is complete once the output was not filled.
            if pos == block.len() && out.len() < out.capacity() {
                return out;
            }
            out.reserve(256);
        }
    }
}

/// The decompressing side: one zlib stream across all the peer's header blocks.
pub struct HeaderDecompressor(Decompress);

impl HeaderDecompressor {
    pub fn new() -> HeaderDecompressor {
        HeaderDecompressor(Decompress::new(true))
    }

    fn decompress(&mut self, input: &[u8]) -> Result<Vec<u8>, Error> {
        let mut out = Vec::with_capacity(input.len() * 4 + 64);
        let mut pos = 0;
        loop {
            let (in0, out0) = (self.0.total_in(), self.0.total_out());
            let r = self
                .0
                .decompress_vec(&input[pos..], &mut out, FlushDecompress::Sync);
            pos += (self.0.total_in() - in0) as usize;
            let progressed = self.0.total_in() != in0 || self.0.total_out() != out0;
            match r {
                Ok(Status::StreamEnd) => return Err(protocol("the header stream ended")),
                Ok(_) if pos == input.len() && out.len() < out.capacity() => return Ok(out),
                Ok(_) if !progressed && out.len() < out.capacity() => {
                    return Err(protocol("a truncated header block"));
                }
                Ok(_) => {}
                Err(e) => match e.needs_dictionary() {
                    Some(_) => {
                        self.0
                            .set_dictionary(dictionary())
                            .map_err(|e| protocol(format!("not SPDY/3's dictionary: {e}")))?;
                    }
                    None => return Err(protocol(format!("header block: {e}"))),
                },
            }
            if out.len() > MAX_HEADER_BLOCK {
                return Err(protocol("a header block over 1 MiB"));
            }
            if out.len() == out.capacity() {
                out.reserve(out.capacity());
            }
        }
    }
}

fn encode_block(h: &Headers) -> Vec<u8> {
    let mut b = Vec::new();
    b.extend_from_slice(&(h.len() as u32).to_be_bytes());
    for (n, v) in h {
        let n = n.to_ascii_lowercase();
        b.extend_from_slice(&(n.len() as u32).to_be_bytes());
        b.extend_from_slice(n.as_bytes());
        b.extend_from_slice(&(v.len() as u32).to_be_bytes());
        b.extend_from_slice(v.as_bytes());
    }
    b
}

/// A reader over a frame's payload that fails on truncation instead of panicking.
struct Cursor<'a>(&'a [u8]);

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], Error> {
        if self.0.len() < n {
            return Err(protocol("a frame shorter than its fields"));
        }
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        Ok(a)
    }
    fn u32(&mut self) -> Result<u32, Error> {
        let b = self.take(4)?;
        Ok(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }
    fn u8(&mut self) -> Result<u8, Error> {
        Ok(self.take(1)?[0])
    }
    fn string(&mut self) -> Result<String, Error> {
        let n = self.u32()? as usize;
        String::from_utf8(self.take(n)?.to_vec())
            .map_err(|_| protocol("a header that is not UTF-8"))
    }
}

fn decode_block(raw: &[u8]) -> Result<Headers, Error> {
    let mut c = Cursor(raw);
    let count = c.u32()? as usize;
    let mut h: Headers = Vec::with_capacity(count.min(64));
    for _ in 0..count {
        let name = c.string()?;
        let value = c.string()?;
        if name.is_empty() || name.bytes().any(|b| b.is_ascii_uppercase()) {
            return Err(protocol(format!(
                "header name {name:?} (empty or not lowercase)"
            )));
        }
        if h.iter().any(|(n, _)| *n == name) {
            return Err(protocol(format!("header {name:?} twice")));
        }
        h.push((name, value));
    }
    if !c.0.is_empty() {
        return Err(protocol("bytes after the header block's pairs"));
    }
    Ok(h)
}

fn control(kind: u16, flags: u8, payload: &[u8]) -> Vec<u8> {
    let mut f = Vec::with_capacity(8 + payload.len());
    f.extend_from_slice(
        &(0x8000_0000u32 | u32::from(VERSION) << 16 | u32::from(kind)).to_be_bytes(),
    );
    f.extend_from_slice(&(u32::from(flags) << 24 | payload.len() as u32).to_be_bytes());
    f.extend_from_slice(payload);
    f
}

fn words(ws: &[u32]) -> Vec<u8> {
    ws.iter().flat_map(|w| w.to_be_bytes()).collect()
}

/// A frame's bytes; header blocks go through `comp` (frames must be written in the order
/// they were encoded).
pub fn encode(frame: &Frame, comp: &mut HeaderCompressor) -> Vec<u8> {
    let fin = |f: bool| if f { FLAG_FIN } else { 0 };
    let with_block = |lead: Vec<u8>, h: &Headers, comp: &mut HeaderCompressor| {
        let mut p = lead;
        p.extend_from_slice(&comp.compress(&encode_block(h)));
        p
    };
    match frame {
        Frame::SynStream {
            stream,
            associated,
            priority,
            flags,
            headers,
        } => {
            let mut lead = words(&[stream & 0x7fff_ffff, associated & 0x7fff_ffff]);
            lead.extend_from_slice(&[(priority & 7) << 5, 0]);
            control(SYN_STREAM, *flags, &with_block(lead, headers, comp))
        }
        Frame::SynReply {
            stream,
            fin: f,
            headers,
        } => control(
            SYN_REPLY,
            fin(*f),
            &with_block(words(&[stream & 0x7fff_ffff]), headers, comp),
        ),
        Frame::Headers {
            stream,
            fin: f,
            headers,
        } => control(
            HEADERS,
            fin(*f),
            &with_block(words(&[stream & 0x7fff_ffff]), headers, comp),
        ),
        Frame::RstStream { stream, status } => {
            control(RST_STREAM, 0, &words(&[stream & 0x7fff_ffff, *status]))
        }
        Frame::Settings { flags, entries } => {
            let mut p = words(&[entries.len() as u32]);
            for (f, id, v) in entries {
                p.extend_from_slice(&words(&[u32::from(*f) << 24 | (id & 0xff_ffff), *v]));
            }
            control(SETTINGS, *flags, &p)
        }
        Frame::Ping { id } => control(PING, 0, &words(&[*id])),
        Frame::GoAway { last_good, status } => {
            control(GOAWAY, 0, &words(&[last_good & 0x7fff_ffff, *status]))
        }
        Frame::WindowUpdate { stream, delta } => control(
            WINDOW_UPDATE,
            0,
            &words(&[stream & 0x7fff_ffff, delta & 0x7fff_ffff]),
        ),
        Frame::Data {
            stream,
            fin: f,
            data,
        } => {
            let mut b = words(&[
                stream & 0x7fff_ffff,
                u32::from(fin(*f)) << 24 | data.len() as u32,
            ]);
            b.extend_from_slice(data);
            b
        }
        Frame::Unknown { kind } => control(*kind, 0, &[]),
    }
}

/// The next frame, or None at a clean end of the connection (between frames).
pub async fn read_frame<R: AsyncRead + Unpin>(
    r: &mut R,
    dec: &mut HeaderDecompressor,
) -> Result<Option<Frame>, Error> {
    let mut head = [0u8; 8];
    let mut got = 0;
    while got < head.len() {
        match r.read(&mut head[got..]).await.map_err(Error::Io)? {
            0 if got == 0 => return Ok(None),
            0 => return Err(protocol("the connection ended inside a frame header")),
            n => got += n,
        }
    }
    let w0 = u32::from_be_bytes([head[0], head[1], head[2], head[3]]);
    let flags = head[4];
    let len = u32::from_be_bytes([0, head[5], head[6], head[7]]) as usize;
    let mut payload = vec![0u8; len];
    r.read_exact(&mut payload).await.map_err(Error::Io)?;
    if w0 & 0x8000_0000 == 0 {
        let stream = w0 & 0x7fff_ffff;
        if stream == 0 {
            return Err(protocol("DATA on stream 0"));
        }
        let fin = flags & FLAG_FIN != 0;
        return Ok(Some(Frame::Data {
            stream,
            fin,
            data: Bytes::from(payload),
        }));
    }
    let version = ((w0 >> 16) & 0x7fff) as u16;
    if version != VERSION {
        return Err(protocol(format!("SPDY version {version}")));
    }
    parse_control((w0 & 0xffff) as u16, flags, &payload, dec).map(Some)
}

fn parse_control(
    kind: u16,
    flags: u8,
    payload: &[u8],
    dec: &mut HeaderDecompressor,
) -> Result<Frame, Error> {
    let mut c = Cursor(payload);
    let fin = flags & FLAG_FIN != 0;
    let mut block = |c: &mut Cursor| decode_block(&dec.decompress(c.0)?);
    let frame = match kind {
        SYN_STREAM => {
            let stream = c.u32()? & 0x7fff_ffff;
            let associated = c.u32()? & 0x7fff_ffff;
            let priority = c.u8()? >> 5;
            let _slot = c.u8()?;
            Frame::SynStream {
                stream,
                associated,
                priority,
                flags,
                headers: block(&mut c)?,
            }
        }
        SYN_REPLY | HEADERS => {
            let stream = c.u32()? & 0x7fff_ffff;
            let headers = block(&mut c)?;
            if kind == SYN_REPLY {
                Frame::SynReply {
                    stream,
                    fin,
                    headers,
                }
            } else {
                Frame::Headers {
                    stream,
                    fin,
                    headers,
                }
            }
        }
        RST_STREAM => Frame::RstStream {
            stream: c.u32()? & 0x7fff_ffff,
            status: c.u32()?,
        },
        SETTINGS => {
            let n = c.u32()? as usize;
            let mut entries = Vec::with_capacity(n.min(16));
            for _ in 0..n {
                let id = c.u32()?;
                entries.push(((id >> 24) as u8, id & 0xff_ffff, c.u32()?));
            }
            Frame::Settings { flags, entries }
        }
        PING => Frame::Ping { id: c.u32()? },
        GOAWAY => Frame::GoAway {
            last_good: c.u32()? & 0x7fff_ffff,
            status: c.u32()?,
        },
        WINDOW_UPDATE => Frame::WindowUpdate {
            stream: c.u32()? & 0x7fff_ffff,
            delta: c.u32()? & 0x7fff_ffff,
        },
        other => return Ok(Frame::Unknown { kind: other }),
    };
    if matches!(
        frame,
        Frame::SynStream { stream: 0, .. }
            | Frame::SynReply { stream: 0, .. }
            | Frame::RstStream { stream: 0, .. }
    ) {
        return Err(protocol(format!("{} on stream 0", frame.name())));
    }
    if matches!(frame, Frame::WindowUpdate { delta: 0, .. }) {
        return Err(protocol("WINDOW_UPDATE with a delta of 0"));
    }
    Ok(frame)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every frame survives encode → read, across one compression stream; the dictionary
    /// is SPDY/3's (its Adler-32 is the DICTID the draft's zlib streams carry).
    #[tokio::test]
    async fn frames_round_trip() {
        let mut probe = Compress::new(Compression::default(), true);
        assert_eq!(probe.set_dictionary(dictionary()).ok(), Some(0xe3c6_a7c2));
        assert_eq!(dictionary().len(), 1423);
        let h = |pairs: &[(&str, &str)]| -> Headers {
            pairs
                .iter()
                .map(|(n, v)| (n.to_string(), v.to_string()))
                .collect()
        };
        let frames = vec![
            Frame::SynStream {
                stream: 1,
                associated: 0,
                priority: 2,
                flags: FLAG_FIN,
                headers: h(&[
                    ("streamtype", "error"),
                    ("port", "8080"),
                    ("requestid", "0"),
                ]),
            },
            Frame::SynReply {
                stream: 1,
                fin: false,
                headers: vec![],
            },
            Frame::SynStream {
                stream: 3,
                associated: 0,
                priority: 0,
                flags: 0,
                headers: h(&[("streamtype", "data"), ("port", "8080"), ("requestid", "0")]),
            },
            Frame::Data {
                stream: 3,
                fin: false,
                data: Bytes::from(vec![7u8; 70_000]),
            },
            Frame::Data {
                stream: 3,
                fin: true,
                data: Bytes::new(),
            },
            Frame::WindowUpdate {
                stream: 0,
                delta: 65_536,
            },
            Frame::Settings {
                flags: 0,
                entries: vec![(0, SETTINGS_INITIAL_WINDOW_SIZE, 1 << 20)],
            },
            Frame::Ping { id: 1 },
            Frame::Headers {
                stream: 3,
                fin: true,
                headers: h(&[("x", "a\0b")]),
            },
            Frame::RstStream {
                stream: 3,
                status: rst::CANCEL,
            },
            Frame::GoAway {
                last_good: 3,
                status: goaway::OK,
            },
        ];
        let mut comp = HeaderCompressor::new();
        let wire: Vec<u8> = frames.iter().flat_map(|f| encode(f, &mut comp)).collect();
        let mut r = &wire[..];
        let mut dec = HeaderDecompressor::new();
        for want in &frames {
            let got = read_frame(&mut r, &mut dec).await.unwrap().unwrap();
            assert_eq!(&got, want);
        }
        assert!(read_frame(&mut r, &mut dec).await.unwrap().is_none());
        assert_eq!(header(&h(&[("x", "a\0b")]), "x"), Some("a"));
    }
}
