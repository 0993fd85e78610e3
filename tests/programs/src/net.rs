//! Network words (components only: preview1 has no sockets).
//!
//! `echo-server ADDR` (answer each connection with what it sent), `http-server ADDR STATUS`,
//! `connect ADDR TEXT` (send TEXT, half-close, print the reply), `bind ADDR` (bind and keep a
//! listener), `udp-echo ADDR`, `udp-send ADDR TEXT`, `fill ADDR FLAG` (write without blocking
//! until the connection is full, report, create FLAG, then send 4 MiB more), `sink ADDR FLAG`
//! (accept one connection, wait for FLAG, then read it all), `resolve NAME`,
//! `blast ADDR MIB` / `count-server ADDR` (throughput), `ping ADDR N` (connection latency).
//! `grpc-health ADDR STATUS` (a gRPC health server over plain HTTP/2 answering every check with
//! the numeric serving STATUS: 1 SERVING, 2 NOT_SERVING).
//! `hold N` (open N connections to itself and keep them, or report how many it could).
//! `refused ADDR` connects once and reports. Every other connecting word retries a refused
//! connection for up to 10 s, so a client may start before its server listens. Failures print
//! `error <kind>` and exit 3.

use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream, ToSocketAddrs, UdpSocket};
use std::time::{Duration, Instant};

fn or_exit<T>(what: &str, r: std::io::Result<T>) -> T {
    r.unwrap_or_else(|e| {
        println!("error {:?} ({what}: {e})", e.kind());
        std::process::exit(3)
    })
}

/// Connects, retrying while nothing listens yet.
fn dial(addr: &str) -> TcpStream {
    let start = Instant::now();
    loop {
        match TcpStream::connect(addr) {
            Err(e)
                if e.kind() == ErrorKind::ConnectionRefused && start.elapsed().as_secs() < 10 =>
            {
                std::thread::sleep(Duration::from_millis(2));
            }
            r => return or_exit("connect", r),
        }
    }
}

fn listen(addr: &str) -> TcpListener {
    let l = or_exit("bind", TcpListener::bind(addr));
    println!("listening {}", l.local_addr().unwrap());
    l
}

/// Runs a network word; false if `word` is not one.
pub fn run<'a>(word: &str, arg: &mut dyn FnMut() -> &'a str, kept: &mut Vec<TcpListener>) -> bool {
    match word {
        "echo-server" => {
            let l = listen(arg());
            loop {
                let (mut s, _) = or_exit("accept", l.accept());
                let mut buf = Vec::new();
                if s.read_to_end(&mut buf).is_ok() {
                    let _ = s.write_all(&buf);
                }
            }
        }
        "http-server" => {
            let l = listen(arg());
            let status = arg().to_owned();
            loop {
                let (mut s, _) = or_exit("accept", l.accept());
                let mut head = Vec::new();
                let mut buf = [0; 1024];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match s.read(&mut buf) {
                        Ok(0) | Err(_) => break,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                let head = String::from_utf8_lossy(&head);
                let mut lines = head.lines();
                println!("request {}", lines.next().unwrap_or_default());
                for line in lines.filter(|l| l.to_ascii_lowercase().starts_with("x-")) {
                    println!("header {line}");
                }
                let _ = write!(
                    s,
                    "HTTP/1.1 {status} X\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok"
                );
            }
        }
        "connect" => {
            let (addr, text) = (arg(), arg());
            let mut s = dial(addr);
            // Asked before the peer may have closed (then WASI has no address to give).
            let peer = s.peer_addr().unwrap();
            or_exit("write", s.write_all(text.as_bytes()));
            or_exit("shutdown", s.shutdown(Shutdown::Write));
            let mut reply = String::new();
            or_exit("read", s.read_to_string(&mut reply));
            println!("reply {reply} from {peer}");
        }
        "grpc-health" => {
            let l = listen(arg());
            let status: u8 = arg().parse().expect("grpc-health ADDR STATUS");
            loop {
                let (s, _) = or_exit("accept", l.accept());
                grpc_health(s, status);
            }
        }
        "refused" => match TcpStream::connect(arg()) {
            Ok(s) => println!("connected {}", s.peer_addr().unwrap()),
            Err(e) => println!("error {:?}", e.kind()),
        },
        "bind" => {
            let addr = arg();
            match TcpListener::bind(addr) {
                Ok(l) => {
                    println!("bound {}", l.local_addr().unwrap());
                    kept.push(l);
                }
                Err(e) => println!("error {:?}", e.kind()),
            }
        }
        "udp-echo" => {
            let s = or_exit("bind", UdpSocket::bind(arg()));
            println!("listening {}", s.local_addr().unwrap());
            let mut buf = [0; 2048];
            loop {
                let (n, from) = or_exit("recv", s.recv_from(&mut buf));
                println!(
                    "datagram {} from {from}",
                    String::from_utf8_lossy(&buf[..n])
                );
                or_exit("send", s.send_to(&buf[..n], from));
            }
        }
        "udp-send" => {
            let (addr, text) = (arg(), arg());
            let s = or_exit("bind", UdpSocket::bind("0.0.0.0:0"));
            or_exit("nonblocking", s.set_nonblocking(true));
            let mut buf = [0; 2048];
            // Datagrams sent before the server binds are lost: resend every 50 ms.
            for _ in 0..200 {
                or_exit("send", s.send_to(text.as_bytes(), addr));
                let sent = Instant::now();
                while sent.elapsed() < Duration::from_millis(50) {
                    match s.recv_from(&mut buf) {
                        Ok((n, from)) => {
                            println!("reply {} from {from}", String::from_utf8_lossy(&buf[..n]));
                            return true;
                        }
                        Err(e) if e.kind() == ErrorKind::WouldBlock => {
                            std::thread::sleep(Duration::from_millis(1))
                        }
                        Err(e) => or_exit("recv", Err(e)),
                    }
                }
            }
            or_exit::<()>("recv", Err(ErrorKind::TimedOut.into()));
        }
        "fill" => {
            let (addr, flag) = (arg(), arg());
            let mut s = dial(addr);
            or_exit("nonblocking", s.set_nonblocking(true));
            let chunk = vec![7u8; 64 * 1024];
            let mut sent = 0usize;
            loop {
                match s.write(&chunk) {
                    Ok(n) => sent += n,
                    Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                    Err(e) => or_exit("write", Err(e)),
                }
                if sent > 1 << 30 {
                    break;
                }
            }
            println!("filled {sent}");
            or_exit("flag", std::fs::write(flag, "x"));
            or_exit("blocking", s.set_nonblocking(false));
            for _ in 0..64 {
                or_exit("write", s.write_all(&chunk));
            }
            sent += 64 * chunk.len();
            or_exit("shutdown", s.shutdown(Shutdown::Write));
            println!("sent {sent}");
        }
        "sink" => {
            let (addr, flag) = (arg(), arg());
            let l = listen(addr);
            let (mut s, _) = or_exit("accept", l.accept());
            while std::fs::metadata(flag).is_err() {
                std::thread::sleep(Duration::from_millis(5));
            }
            let mut total = 0usize;
            let mut buf = vec![0; 64 * 1024];
            loop {
                match or_exit("read", s.read(&mut buf)) {
                    0 => break,
                    n => total += n,
                }
            }
            println!("drained {total}");
        }
        "resolve" => {
            let name = arg();
            match (name, 80).to_socket_addrs() {
                Ok(addrs) => {
                    let ips: Vec<String> = addrs.map(|a| a.ip().to_string()).collect();
                    println!("resolved {name} {}", ips.join(","));
                }
                Err(e) => println!("error {:?} ({e})", e.kind()),
            }
        }
        "count-server" => {
            let l = listen(arg());
            loop {
                let (mut s, _) = or_exit("accept", l.accept());
                let mut buf = vec![0; 256 * 1024];
                let mut total = 0usize;
                loop {
                    match or_exit("read", s.read(&mut buf)) {
                        0 => break,
                        n => total += n,
                    }
                }
                or_exit("ack", s.write_all(&(total as u64).to_le_bytes()));
            }
        }
        "blast" => {
            let (addr, mib) = (arg(), arg().parse::<usize>().expect("blast ADDR MIB"));
            let chunk = vec![1u8; 256 * 1024];
            let mut s = dial(addr);
            let start = Instant::now();
            for _ in 0..mib * 4 {
                or_exit("write", s.write_all(&chunk));
            }
            or_exit("shutdown", s.shutdown(Shutdown::Write));
            let mut ack = [0; 8];
            or_exit("ack", s.read_exact(&mut ack));
            assert_eq!(u64::from_le_bytes(ack), (mib as u64) << 20);
            println!(
                "blast {} bytes in {} us",
                mib << 20,
                start.elapsed().as_micros()
            );
        }
        "hold" => {
            // Opens up to N connections to itself and keeps them; reports how many it got.
            let n = arg().parse::<usize>().expect("hold N");
            let l = or_exit("bind", TcpListener::bind("127.0.0.1:0"));
            let addr = l.local_addr().unwrap();
            let mut held = Vec::new();
            for _ in 0..n {
                let step = TcpStream::connect(addr).and_then(|c| Ok((c, l.accept()?.0)));
                match step {
                    Ok(pair) => held.push(pair),
                    Err(e) => {
                        println!("held {} then {:?}", held.len(), e.kind());
                        return true;
                    }
                }
            }
            println!("held {}", held.len());
        }
        "hold-out" => {
            // Opens up to N connections to ADDR and keeps them; reports how many it got.
            let addr = arg();
            let n = arg().parse::<usize>().expect("hold-out ADDR N");
            let mut held = Vec::new();
            for _ in 0..n {
                match TcpStream::connect(addr) {
                    Ok(c) => held.push(c),
                    Err(e) => {
                        println!("held {} then {:?}", held.len(), e.kind());
                        return true;
                    }
                }
            }
            println!("held {}", held.len());
        }
        "ping" => {
            let (addr, n) = (arg(), arg().parse::<usize>().expect("ping ADDR N"));
            drop(dial(addr));
            let mut micros = Vec::new();
            for _ in 0..n {
                let start = Instant::now();
                let mut s = or_exit("connect", TcpStream::connect(addr));
                or_exit("write", s.write_all(b"x"));
                or_exit("shutdown", s.shutdown(Shutdown::Write));
                let mut reply = Vec::new();
                or_exit("read", s.read_to_end(&mut reply));
                micros.push(start.elapsed().as_micros() as u64);
            }
            micros.sort_unstable();
            let pct = |p: usize| micros[(micros.len() - 1) * p / 100];
            println!("ping p50 {} us p99 {} us", pct(50), pct(99));
        }
        _ => return false,
    }
    true
}

fn h2_frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let mut f = (payload.len() as u32).to_be_bytes()[1..].to_vec();
    f.extend([kind, flags]);
    f.extend(stream.to_be_bytes());
    f.extend(payload);
    f
}

/// Serves one HTTP/2 (prior knowledge) connection of `grpc.health.v1.Health/Check` calls: just
/// enough of the protocol for a health client (no HPACK decoding; the request's headers are
/// not needed).
fn grpc_health(mut s: TcpStream, status: u8) {
    let mut preface = [0; 24];
    if s.read_exact(&mut preface).is_err() || &preface[..3] != b"PRI" {
        return;
    }
    let _ = s.write_all(&h2_frame(0x4, 0, 0, &[]));
    let mut body: Vec<u8> = Vec::new();
    loop {
        let mut head = [0; 9];
        if s.read_exact(&mut head).is_err() {
            return;
        }
        let len = u32::from_be_bytes([0, head[0], head[1], head[2]]) as usize;
        let (kind, flags) = (head[3], head[4]);
        let stream = u32::from_be_bytes([head[5], head[6], head[7], head[8]]) & 0x7fff_ffff;
        let mut payload = vec![0; len];
        if s.read_exact(&mut payload).is_err() {
            return;
        }
        let reply = match kind {
            0x4 if flags & 1 == 0 => h2_frame(0x4, 1, 0, &[]),
            0x6 if flags & 1 == 0 => h2_frame(0x6, 1, 0, &payload),
            0x7 => return,
            0x0 => {
                body.extend(&payload);
                if flags & 1 == 0 {
                    continue;
                }
                // HealthCheckRequest { string service = 1 } after the 5-byte message prefix.
                let service = match body.get(5..) {
                    Some([0x0a, n, rest @ ..]) => {
                        String::from_utf8_lossy(&rest[..*n as usize]).into_owned()
                    }
                    _ => String::new(),
                };
                println!("health check service={service:?}");
                body.clear();
                // :status 200 (static index 8); content-type (index 31) application/grpc.
                let mut headers = vec![0x88, 0x0f, 0x10, 16];
                headers.extend(b"application/grpc");
                let mut reply = h2_frame(0x1, 0x4, stream, &headers);
                reply.extend(h2_frame(0x0, 0, stream, &[0, 0, 0, 0, 2, 0x08, status]));
                let mut trailers = vec![0x00, 11];
                trailers.extend(b"grpc-status");
                trailers.extend([1, b'0']);
                reply.extend(h2_frame(0x1, 0x5, stream, &trailers));
                reply
            }
            _ => continue,
        };
        if s.write_all(&reply).is_err() {
            return;
        }
    }
}
