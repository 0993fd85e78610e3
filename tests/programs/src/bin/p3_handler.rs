//! A WASI 0.3 HTTP handler (`wasi:http/handler@0.3`, the `wasi:http/service` world). By path:
//! `/` says hello with a count of the requests this instance handled (always 1), `/env/NAME`
//! answers NAME's value, `/sleep/MS` answers after MS milliseconds, `/trap` traps, `/whoami`
//! answers the request's URI as the handler sees it (scheme, authority, path). The body is
//! written by a task that outlives `handle`, as 0.3 handlers do. It prints `handling PATH` when
//! a request starts.

use std::sync::atomic::{AtomicU32, Ordering};

use wasip3::http::types::{ErrorCode, Fields, Request, Response, Scheme};
use wasip3::{wit_bindgen, wit_future, wit_stream};

wasip3::http::service::export!(Handler);

static HANDLED: AtomicU32 = AtomicU32::new(0);

struct Handler;

fn respond(status: u16, text: String) -> Result<Response, ErrorCode> {
    let (mut body_tx, body_rx) = wit_stream::new();
    let (trailers_tx, trailers_rx) = wit_future::new(|| Ok(None));
    let (response, _sent) = Response::new(Fields::new(), Some(body_rx), trailers_rx);
    response.set_status_code(status).unwrap();
    drop(trailers_tx);
    wit_bindgen::spawn_local(async move {
        let rest = body_tx.write_all(text.into_bytes()).await;
        assert!(rest.is_empty());
    });
    Ok(response)
}

impl wasip3::exports::http::handler::Guest for Handler {
    async fn handle(request: Request) -> Result<Response, ErrorCode> {
        let handled = HANDLED.fetch_add(1, Ordering::SeqCst) + 1;
        let path = request.get_path_with_query().unwrap_or_default();
        println!("handling {path}");
        let mut parts = path.trim_start_matches('/').splitn(2, '/');
        let (word, rest) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
        match word {
            "" => respond(200, format!("hello 0.3 {handled}\n")),
            "env" => respond(
                200,
                format!("{}\n", std::env::var(rest).unwrap_or_default()),
            ),
            "sleep" => {
                let ms: u64 = rest.parse().unwrap();
                wasip3::clocks::monotonic_clock::wait_for(ms * 1_000_000).await;
                respond(200, "slept\n".into())
            }
            "trap" => panic!("trap requested"),
            "whoami" => {
                let scheme = match request.get_scheme() {
                    Some(Scheme::Http) => "http".to_owned(),
                    Some(Scheme::Https) => "https".to_owned(),
                    Some(Scheme::Other(other)) => other,
                    None => "(none)".to_owned(),
                };
                let authority = request.get_authority().unwrap_or("(none)".to_owned());
                respond(200, format!("{scheme}://{authority}{path}\n"))
            }
            _ => respond(404, "not found\n".into()),
        }
    }
}

fn main() {}
