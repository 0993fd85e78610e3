//! A WASI 0.3 (p3) command: its `wasi:cli/run@0.3` runs a script given as argv, through the
//! 0.3 interfaces only (stdio as streams, the async monotonic clock).
//!
//! Words: `print TEXT`, `eprint TEXT`, `prompt TEXT` (no newline), `stdin` (each line of stdin
//! printed back as `read: LINE` as it comes), `args`, `env NAME`, `sleep MS`, `fail` (run returns
//! an error: exit 1), `spin` (compute forever), `trap`; and 0.3 sockets: `tcp-echo PORT` (answers
//! each connection's bytes with `echo: ` and them, forever), `tcp-send HOST PORT TEXT` (resolves
//! HOST, connects, retrying a refused connect for up to 5 s, sends TEXT, prints the answer or the
//! error), `udp-pingpong` (two sockets exchange a datagram each way; prints what came back and from
//! where), `lookup NAME` (prints the addresses or the error).

use wasip3::cli::{environment, stderr, stdout};
use wasip3::sockets::ip_name_lookup::resolve_addresses;
use wasip3::sockets::types::{
    ErrorCode, IpAddress, IpAddressFamily, IpSocketAddress, Ipv4SocketAddress, TcpSocket, UdpSocket,
};

wasip3::cli::command::export!(Command);

struct Command;

async fn write(text: String, to_stderr: bool) {
    write_bytes(format!("{text}\n").into_bytes(), to_stderr).await
}

async fn write_bytes(bytes: Vec<u8>, to_stderr: bool) {
    let (mut tx, rx) = wasip3::wit_stream::new();
    futures::join!(
        async {
            if to_stderr {
                stderr::write_via_stream(rx).await.unwrap();
            } else {
                stdout::write_via_stream(rx).await.unwrap();
            }
        },
        async {
            let rest = tx.write_all(bytes).await;
            assert!(rest.is_empty());
            drop(tx);
        }
    );
}

impl wasip3::exports::cli::run::Guest for Command {
    async fn run() -> Result<(), ()> {
        let args = environment::get_arguments();
        let mut words = args.iter().skip(1).map(String::as_str);
        while let Some(word) = words.next() {
            let mut arg = || words.next().expect("a word's argument").to_owned();
            match word {
                "print" => write(arg(), false).await,
                "eprint" => write(arg(), true).await,
                "prompt" => write_bytes(arg().into_bytes(), false).await,
                "stdin" => echo_stdin().await,
                "args" => write(args[1..].join(" "), false).await,
                "env" => {
                    let name = arg();
                    let value = environment::get_environment()
                        .into_iter()
                        .find(|(k, _)| *k == name)
                        .map(|(_, v)| v)
                        .unwrap_or_default();
                    write(format!("{name}={value}"), false).await
                }
                "sleep" => {
                    let ms: u64 = arg().parse().unwrap();
                    wasip3::clocks::monotonic_clock::wait_for(ms * 1_000_000).await;
                }
                "tcp-echo" => tcp_echo(arg().parse().unwrap()).await,
                "tcp-send" => {
                    let (host, port, text) = (arg(), arg().parse().unwrap(), arg());
                    let line = match tcp_send(&host, port, text).await {
                        Ok(reply) => format!("reply: {reply}"),
                        Err(e) => format!("error: {e}"),
                    };
                    write(line, false).await
                }
                "udp-pingpong" => write(udp_pingpong().await, false).await,
                "lookup" => {
                    let line = match resolve_addresses(arg()).await {
                        Ok(ips) => ips.iter().map(show_ip).collect::<Vec<_>>().join(" "),
                        Err(e) => format!("error: {e:?}"),
                    };
                    write(line, false).await
                }
                "fail" => return Err(()),
                "spin" => loop {
                    std::hint::black_box(&args);
                },
                "trap" => panic!("trap requested"),
                other => panic!("unknown word {other:?}"),
            }
        }
        Ok(())
    }
}

fn show_ip(ip: &IpAddress) -> String {
    match *ip {
        IpAddress::Ipv4((a, b, c, d)) => format!("{a}.{b}.{c}.{d}"),
        IpAddress::Ipv6((a, b, c, d, e, f, g, h)) => {
            std::net::Ipv6Addr::new(a, b, c, d, e, f, g, h).to_string()
        }
    }
}

fn show(addr: &IpSocketAddress) -> String {
    match addr {
        IpSocketAddress::Ipv4(a) => format!("{}:{}", show_ip(&IpAddress::Ipv4(a.address)), a.port),
        IpSocketAddress::Ipv6(a) => {
            format!("[{}]:{}", show_ip(&IpAddress::Ipv6(a.address)), a.port)
        }
    }
}

fn v4(address: (u8, u8, u8, u8), port: u16) -> IpSocketAddress {
    IpSocketAddress::Ipv4(Ipv4SocketAddress { port, address })
}

/// Sends `data` on `socket` and closes its sending side.
async fn send_all(socket: &TcpSocket, data: Vec<u8>) -> Result<(), ErrorCode> {
    let (mut tx, rx) = wasip3::wit_stream::new();
    let sent = socket.send(rx);
    // What a closed connection did not take is left over; `sent` says why.
    let _rest = tx.write_all(data).await;
    drop(tx);
    sent.await
}

async fn tcp_echo(port: u16) {
    let server = TcpSocket::create(IpAddressFamily::Ipv4).unwrap();
    server.bind(v4((0, 0, 0, 0), port)).unwrap();
    let mut connections = server.listen().unwrap();
    write(format!("listening on {port}"), false).await;
    while let Some(conn) = connections.next().await {
        let (rx, received) = conn.receive();
        let mut data = b"echo: ".to_vec();
        data.extend(rx.collect().await);
        // A peer that only connects and leaves (a `tcpSocket` probe) gets nothing back.
        if received.await.is_ok() {
            let _ = send_all(&conn, data).await;
        }
    }
}

async fn tcp_send(host: &str, port: u16, text: String) -> Result<String, String> {
    let ips = resolve_addresses(host.to_owned())
        .await
        .map_err(|e| format!("lookup: {e:?}"))?;
    let ip = ips.first().ok_or("lookup: no address")?;
    let IpAddress::Ipv4(address) = *ip else {
        return Err("lookup: not IPv4".into());
    };
    let mut tries = 0;
    let socket = loop {
        let socket = TcpSocket::create(IpAddressFamily::Ipv4).unwrap();
        match socket.connect(v4(address, port)).await {
            Ok(()) => break socket,
            Err(ErrorCode::ConnectionRefused) if tries < 100 => {
                tries += 1;
                wasip3::clocks::monotonic_clock::wait_for(50_000_000).await;
            }
            Err(e) => return Err(format!("connect: {e:?}")),
        }
    };
    let (rx, received) = socket.receive();
    send_all(&socket, text.into_bytes())
        .await
        .map_err(|e| format!("send: {e:?}"))?;
    let reply = rx.collect().await;
    received.await.map_err(|e| format!("receive: {e:?}"))?;
    Ok(String::from_utf8_lossy(&reply).into_owned())
}

async fn udp_pingpong() -> String {
    let server = UdpSocket::create(IpAddressFamily::Ipv4).unwrap();
    server.bind(v4((127, 0, 0, 1), 0)).unwrap();
    let server_addr = server.get_local_address().unwrap();
    let client = UdpSocket::create(IpAddressFamily::Ipv4).unwrap();
    client.connect(server_addr).unwrap();
    client.send(b"ping".to_vec(), None).await.unwrap();
    let (data, from) = server.receive().await.unwrap();
    assert_eq!(show(&from), show(&client.get_local_address().unwrap()));
    let mut reply = b"pong: ".to_vec();
    reply.extend(data);
    server.send(reply, Some(from)).await.unwrap();
    let (data, from) = client.receive().await.unwrap();
    format!("{} from {}", String::from_utf8_lossy(&data), show(&from))
}

fn main() {}

/// Prints each line of stdin back as `read: LINE` as it comes, until stdin ends.
async fn echo_stdin() {
    let (mut rx, done) = wasip3::cli::stdin::read_via_stream();
    let mut pending = Vec::new();
    loop {
        let (result, bytes) = rx.read(Vec::with_capacity(4096)).await;
        pending.extend_from_slice(&bytes);
        while let Some(nl) = pending.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = pending.drain(..=nl).collect();
            let line = String::from_utf8_lossy(&line[..nl]).into_owned();
            write(format!("read: {line}"), false).await;
        }
        if !matches!(result, wasip3::wit_bindgen::StreamResult::Complete(_)) {
            break;
        }
    }
    drop(rx);
    let _ = done.await;
}
