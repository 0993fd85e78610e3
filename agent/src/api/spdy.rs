//! SPDY/3.1 framing, the part `kubectl port-forward` uses (client-go's spdystream): streams
//! opened with SYN_STREAM and answered with SYN_REPLY, DATA with FIN half-closes, RST_STREAM,
//! PING echoed, GOAWAY; SETTINGS, HEADERS and WINDOW_UPDATE are read and ignored (spdystream
//! keeps no flow-control windows). Header blocks are zlib streams, one per direction for the
//! whole session, the client's primed with the SPDY/3 dictionary.
//!
//! Every size is bounded: frames [`MAX_FRAME`] bytes, a header block [`MAX_HEADERS`] bytes once
//! inflated and [`MAX_PAIRS`] pairs.

use flate2::{Compress, Compression, Decompress, FlushCompress, FlushDecompress, Status};
use tokio::io::{AsyncRead, AsyncReadExt};

/// The largest frame taken (client-go sends data in pieces of 32 KiB).
pub(super) const MAX_FRAME: usize = 1 << 20;
/// The most a header block inflates to.
const MAX_HEADERS: usize = 64 * 1024;
/// The most name/value pairs in a header block.
const MAX_PAIRS: u32 = 64;

const SYN_STREAM: u16 = 1;
const SYN_REPLY: u16 = 2;
const RST_STREAM: u16 = 3;
const PING: u16 = 6;
const GOAWAY: u16 = 7;
const FLAG_FIN: u8 = 0x01;

/// RST_STREAM's status for a stream that breaks the protocol.
pub(super) const PROTOCOL_ERROR: u32 = 1;
/// RST_STREAM's status for a stream refused (too many at once).
pub(super) const REFUSED_STREAM: u32 = 3;
/// RST_STREAM's status for a stream the server gave up on (its pod side stopped reading).
pub(super) const CANCEL: u32 = 5;

/// A frame from the client.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Frame {
    SynStream {
        id: u32,
        headers: Vec<(String, String)>,
    },
    Data {
        id: u32,
        fin: bool,
        data: Vec<u8>,
    },
    RstStream {
        id: u32,
    },
    Ping {
        id: u32,
    },
    GoAway,
    /// SETTINGS, HEADERS, WINDOW_UPDATE, and control frames of unknown types.
    Ignored,
}

/// Why a session cannot go on.
pub(super) type Error = std::io::Error;

fn broken(why: impl Into<String>) -> Error {
    Error::new(std::io::ErrorKind::InvalidData, why.into())
}

/// Reads the client's frames.
pub(super) struct Reader<R> {
    io: R,
    inflate: Decompress,
}

impl<R: AsyncRead + Unpin> Reader<R> {
    pub(super) fn new(io: R) -> Reader<R> {
        Reader {
            io,
            inflate: Decompress::new(true),
        }
    }

    /// The next frame; `None` at the end of the connection.
    pub(super) async fn next(&mut self) -> Result<Option<Frame>, Error> {
        let mut head = [0u8; 8];
        match self.io.read_exact(&mut head).await {
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
            Err(e) => return Err(e),
        }
        let flags = head[4];
        let length = u32::from_be_bytes([0, head[5], head[6], head[7]]) as usize;
        if length > MAX_FRAME {
            return Err(broken(format!(
                "a frame of {length} bytes (at most {MAX_FRAME})"
            )));
        }
        let mut body = vec![0; length];
        self.io.read_exact(&mut body).await?;
        if head[0] & 0x80 == 0 {
            let id = u32::from_be_bytes([head[0], head[1], head[2], head[3]]);
            return Ok(Some(Frame::Data {
                id,
                fin: flags & FLAG_FIN != 0,
                data: body,
            }));
        }
        let version = u16::from_be_bytes([head[0] & 0x7f, head[1]]);
        if version != 3 {
            return Err(broken(format!("SPDY version {version}, not 3")));
        }
        let stream_id = |b: &[u8]| -> Result<u32, Error> {
            let id = b
                .get(..4)
                .ok_or_else(|| broken("a control frame too short"))?;
            Ok(u32::from_be_bytes([id[0] & 0x7f, id[1], id[2], id[3]]))
        };
        Ok(Some(match u16::from_be_bytes([head[2], head[3]]) {
            SYN_STREAM => {
                let id = stream_id(&body)?;
                let block = body
                    .get(10..)
                    .ok_or_else(|| broken("a SYN_STREAM too short"))?;
                let headers = parse_headers(&self.inflate(block)?)?;
                Frame::SynStream { id, headers }
            }
            RST_STREAM => Frame::RstStream {
                id: stream_id(&body)?,
            },
            PING => Frame::Ping {
                id: stream_id(&body)?,
            },
            GOAWAY => Frame::GoAway,
            _ => Frame::Ignored,
        }))
    }

    /// Inflates one header block: the next piece of the session's zlib stream.
    fn inflate(&mut self, mut input: &[u8]) -> Result<Vec<u8>, Error> {
        let mut out = Vec::with_capacity(1024);
        loop {
            let (before_in, before_out) = (self.inflate.total_in(), out.len());
            let result = self
                .inflate
                .decompress_vec(input, &mut out, FlushDecompress::Sync);
            let used = (self.inflate.total_in() - before_in) as usize;
            input = &input[used..];
            match result {
                Ok(_) => {}
                Err(e) if e.needs_dictionary().is_some() => {
                    self.inflate
                        .set_dictionary(DICTIONARY)
                        .map_err(|e| broken(format!("the header dictionary: {e}")))?;
                    continue;
                }
                Err(e) => return Err(broken(format!("a header block: {e}"))),
            }
            if out.len() > MAX_HEADERS {
                return Err(broken(format!("a header block past {MAX_HEADERS} bytes")));
            }
            if input.is_empty() && out.len() < out.capacity() {
                return Ok(out);
            }
            if used == 0 && out.len() == before_out {
                // No progress with room to spare: more room.
                if out.len() < out.capacity() {
                    return Err(broken("a header block that does not inflate"));
                }
            }
            out.reserve(out.capacity().max(1024));
        }
    }
}

/// Name/value pairs: a count, then each name and value with its length, 32 bits big-endian.
fn parse_headers(block: &[u8]) -> Result<Vec<(String, String)>, Error> {
    let mut rest = block;
    let word = |rest: &mut &[u8]| -> Result<u32, Error> {
        let (n, tail) = rest
            .split_first_chunk::<4>()
            .ok_or_else(|| broken("a header block cut short"))?;
        *rest = tail;
        Ok(u32::from_be_bytes(*n))
    };
    let count = word(&mut rest)?;
    if count > MAX_PAIRS {
        return Err(broken(format!("{count} headers (at most {MAX_PAIRS})")));
    }
    let text = |rest: &mut &[u8]| -> Result<String, Error> {
        let n = word(rest)? as usize;
        if n > rest.len() {
            return Err(broken("a header block cut short"));
        }
        let (s, tail) = rest.split_at(n);
        *rest = tail;
        Ok(String::from_utf8_lossy(s).into_owned())
    };
    (0..count)
        .map(|_| Ok((text(&mut rest)?, text(&mut rest)?)))
        .collect()
}

/// Makes the server's frames.
pub(super) struct Writer {
    deflate: Compress,
}

impl Writer {
    pub(super) fn new() -> Writer {
        Writer {
            deflate: Compress::new(Compression::fast(), true),
        }
    }

    /// SYN_REPLY with no headers, as the kubelet answers each stream.
    pub(super) fn syn_reply(&mut self, id: u32) -> Vec<u8> {
        let block = self.deflate_block(&0u32.to_be_bytes());
        let mut body = id.to_be_bytes().to_vec();
        body.extend_from_slice(&block);
        control(SYN_REPLY, 0, &body)
    }

    fn deflate_block(&mut self, mut input: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(64);
        loop {
            let before = self.deflate.total_in();
            let status = self
                .deflate
                .compress_vec(input, &mut out, FlushCompress::Sync);
            input = &input[(self.deflate.total_in() - before) as usize..];
            if matches!(status, Err(_) | Ok(Status::StreamEnd))
                || (input.is_empty() && out.len() < out.capacity())
            {
                return out;
            }
            out.reserve(64);
        }
    }
}

/// DATA on stream `id`.
pub(super) fn data(id: u32, fin: bool, bytes: &[u8]) -> Vec<u8> {
    let mut frame = Vec::with_capacity(8 + bytes.len());
    frame.extend_from_slice(&(id & 0x7fff_ffff).to_be_bytes());
    frame.push(if fin { FLAG_FIN } else { 0 });
    frame.extend_from_slice(&(bytes.len() as u32).to_be_bytes()[1..]);
    frame.extend_from_slice(bytes);
    frame
}

/// RST_STREAM of stream `id` with `status`.
pub(super) fn rst_stream(id: u32, status: u32) -> Vec<u8> {
    let mut body = id.to_be_bytes().to_vec();
    body.extend_from_slice(&status.to_be_bytes());
    control(RST_STREAM, 0, &body)
}

/// GOAWAY: the session ends after stream `last`, for `status` (a session error).
pub(super) fn goaway(last: u32, status: u32) -> Vec<u8> {
    let mut body = last.to_be_bytes().to_vec();
    body.extend_from_slice(&status.to_be_bytes());
    control(GOAWAY, 0, &body)
}

/// The answer to the client's PING `id`.
pub(super) fn ping(id: u32) -> Vec<u8> {
    control(PING, 0, &id.to_be_bytes())
}

fn control(kind: u16, flags: u8, body: &[u8]) -> Vec<u8> {
    let mut frame = Vec::with_capacity(8 + body.len());
    frame.extend_from_slice(&[0x80, 3]);
    frame.extend_from_slice(&kind.to_be_bytes());
    frame.push(flags);
    frame.extend_from_slice(&(body.len() as u32).to_be_bytes()[1..]);
    frame.extend_from_slice(body);
    frame
}

/// The SPDY/3 header compression dictionary (the protocol's, as spdystream uses it).
const DICTIONARY: &[u8] =
    b"\x00\x00\x00\x07options\x00\x00\x00\x04head\x00\x00\x00\x04post\x00\x00\x00\x03put\x00\
    \x00\x00\x06delete\x00\x00\x00\x05trace\x00\x00\x00\x06accept\x00\x00\x00\x0eaccept-char\
    set\x00\x00\x00\x0faccept-encoding\x00\x00\x00\x0faccept-language\x00\x00\x00\x0daccept-\
    ranges\x00\x00\x00\x03age\x00\x00\x00\x05allow\x00\x00\x00\x0dauthorization\x00\x00\x00\
    \x0dcache-control\x00\x00\x00\x0aconnection\x00\x00\x00\x0ccontent-base\x00\x00\x00\x10c\
    ontent-encoding\x00\x00\x00\x10content-language\x00\x00\x00\x0econtent-length\x00\x00\
    \x00\x10content-location\x00\x00\x00\x0bcontent-md5\x00\x00\x00\x0dcontent-range\x00\x00\
    \x00\x0ccontent-type\x00\x00\x00\x04date\x00\x00\x00\x04etag\x00\x00\x00\x06expect\x00\
    \x00\x00\x07expires\x00\x00\x00\x04from\x00\x00\x00\x04host\x00\x00\x00\x08if-match\x00\
    \x00\x00\x11if-modified-since\x00\x00\x00\x0dif-none-match\x00\x00\x00\x08if-range\x00\
    \x00\x00\x13if-unmodified-since\x00\x00\x00\x0dlast-modified\x00\x00\x00\x08location\x00\
    \x00\x00\x0cmax-forwards\x00\x00\x00\x06pragma\x00\x00\x00\x12proxy-authenticate\x00\x00\
    \x00\x13proxy-authorization\x00\x00\x00\x05range\x00\x00\x00\x07referer\x00\x00\x00\x0br\
    etry-after\x00\x00\x00\x06server\x00\x00\x00\x02te\x00\x00\x00\x07trailer\x00\x00\x00\
    \x11transfer-encoding\x00\x00\x00\x07upgrade\x00\x00\x00\x0auser-agent\x00\x00\x00\x04va\
    ry\x00\x00\x00\x03via\x00\x00\x00\x07warning\x00\x00\x00\x10www-authenticate\x00\x00\x00\
    \x06method\x00\x00\x00\x03get\x00\x00\x00\x06status\x00\x00\x00\x06200 OK\x00\x00\x00\
    \x07version\x00\x00\x00\x08HTTP/1.1\x00\x00\x00\x03url\x00\x00\x00\x06public\x00\x00\x00\
    \x0aset-cookie\x00\x00\x00\x0akeep-alive\x00\x00\x00\x06origin10010120120220520630030230\
    3304305306307402405406407408409410411412413414415416417502504505203 Non-Authoritative In\
    formation204 No Content301 Moved Permanently400 Bad Request401 Unauthorized403 Forbidden\
    404 Not Found500 Internal Server Error501 Not Implemented503 Service UnavailableJan Feb M\
    ar Apr May Jun Jul Aug Sept Oct Nov Dec 00:00:00 Mon, Tue, Wed, Thu, Fri, Sat, Sun, GMTc\
    hunked,text/html,image/png,image/jpg,image/gif,application/xml,application/xhtml+xml,tex\
    t/plain,text/javascript,publicprivatemax-age=gzip,deflate,sdchcharset=utf-8charset=iso-8\
    859-1,utf-,*,enq=0.";

/// A client's SYN_STREAM as spdystream makes it: headers deflated with the dictionary, by a
/// `deflate` made with [`client_deflate`].
#[cfg(test)]
pub(super) fn syn_stream(deflate: &mut Compress, id: u32, headers: &[(&str, &str)]) -> Vec<u8> {
    let mut block = (headers.len() as u32).to_be_bytes().to_vec();
    for (k, v) in headers {
        for s in [k, v] {
            block.extend_from_slice(&(s.len() as u32).to_be_bytes());
            block.extend_from_slice(s.as_bytes());
        }
    }
    let mut out = Vec::with_capacity(4096);
    deflate
        .compress_vec(&block, &mut out, FlushCompress::Sync)
        .unwrap();
    let mut body = id.to_be_bytes().to_vec();
    body.extend_from_slice(&[0, 0, 0, 0, 0, 0]);
    body.extend_from_slice(&out);
    control(SYN_STREAM, 0, &body)
}

/// A client's header compressor, primed with the dictionary.
#[cfg(test)]
pub(super) fn client_deflate() -> Compress {
    let mut deflate = Compress::new(Compression::default(), true);
    deflate.set_dictionary(DICTIONARY).unwrap();
    deflate
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn frames_are_read_as_spdystream_writes_them() {
        assert_eq!(DICTIONARY.len(), 1423);
        let mut deflate = client_deflate();
        let mut wire = syn_stream(
            &mut deflate,
            1,
            &[
                ("streamtype", "error"),
                ("port", "8080"),
                ("requestid", "0"),
            ],
        );
        wire.extend(syn_stream(&mut deflate, 3, &[("streamtype", "data")]));
        wire.extend(data(3, true, b"hello"));
        wire.extend(ping(1));
        wire.extend(rst_stream(3, PROTOCOL_ERROR));
        let mut reader = Reader::new(&wire[..]);
        let pairs = |p: &[(&str, &str)]| -> Vec<(String, String)> {
            p.iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        assert_eq!(
            reader.next().await.unwrap(),
            Some(Frame::SynStream {
                id: 1,
                headers: pairs(&[
                    ("streamtype", "error"),
                    ("port", "8080"),
                    ("requestid", "0")
                ])
            })
        );
        // The second block goes on with the same zlib stream.
        assert_eq!(
            reader.next().await.unwrap(),
            Some(Frame::SynStream {
                id: 3,
                headers: pairs(&[("streamtype", "data")])
            })
        );
        assert_eq!(
            reader.next().await.unwrap(),
            Some(Frame::Data {
                id: 3,
                fin: true,
                data: b"hello".to_vec()
            })
        );
        assert_eq!(reader.next().await.unwrap(), Some(Frame::Ping { id: 1 }));
        assert_eq!(
            reader.next().await.unwrap(),
            Some(Frame::RstStream { id: 3 })
        );
        assert_eq!(reader.next().await.unwrap(), None);
    }

    #[tokio::test]
    async fn replies_inflate_and_bombs_are_refused() {
        // Our replies, read back as a client reads them.
        let mut writer = Writer::new();
        let mut wire = writer.syn_reply(1);
        wire.extend(writer.syn_reply(3));
        let mut inflate = Decompress::new(true);
        let mut rest = &wire[..];
        for id in [1u32, 3] {
            let length = u32::from_be_bytes([0, rest[5], rest[6], rest[7]]) as usize;
            let (frame, tail) = rest.split_at(8 + length);
            rest = tail;
            assert_eq!(&frame[..4], &[0x80, 3, 0, 2]);
            assert_eq!(&frame[8..12], &id.to_be_bytes());
            let mut out = Vec::with_capacity(64);
            inflate
                .decompress_vec(&frame[12..], &mut out, FlushDecompress::Sync)
                .unwrap();
            assert_eq!(out, [0, 0, 0, 0]);
        }
        // A frame past the bound, and a header block that inflates past its bound.
        let mut big = data(1, false, &[]);
        big[5..8].copy_from_slice(&((MAX_FRAME + 1) as u32).to_be_bytes()[1..]);
        assert!(Reader::new(&big[..]).next().await.is_err());
        let mut deflate = Compress::new(Compression::best(), true);
        let huge = "x".repeat(200_000);
        let bomb = syn_stream(&mut deflate, 1, &[("a", &huge)]);
        assert!(bomb.len() < MAX_FRAME);
        assert!(Reader::new(&bomb[..]).next().await.is_err());
    }
}
