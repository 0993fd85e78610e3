//! An HTTP handler: a `wasi:http/proxy` component. wasmpod serves it on the container's port
//! and makes a fresh instance for every request, so nothing here outlives one request.
//!
//! `GET /` greets, `GET /healthz` is for the readiness probe, `GET /motd` answers what the
//! refresher sidecar last wrote to the shared volume.

use wasip2::http::types::{
    Fields, IncomingRequest, Method, OutgoingBody, OutgoingResponse, ResponseOutparam,
};

wasip2::http::proxy::export!(Handler);

struct Handler;

impl wasip2::exports::http::incoming_handler::Guest for Handler {
    fn handle(request: IncomingRequest, out: ResponseOutparam) {
        let path = request.path_with_query().unwrap_or_default();
        let (status, body) = match (request.method(), path.as_str()) {
            (Method::Get, "/") => {
                let name = std::env::var("GREETING_NAME").unwrap_or_else(|_| "world".into());
                (200, format!("Hello, {name}! Served by a fresh instance.\n"))
            }
            (Method::Get, "/healthz") => (200, "ok\n".to_owned()),
            (Method::Get, "/motd") => match std::fs::read_to_string("/shared/motd") {
                Ok(motd) => (200, motd),
                Err(e) => (503, format!("no message yet: {e}\n")),
            },
            _ => (404, "not found\n".to_owned()),
        };
        let headers = Fields::from_list(&[(
            "content-type".to_owned(),
            b"text/plain; charset=utf-8".to_vec(),
        )])
        .unwrap();
        let response = OutgoingResponse::new(headers);
        response.set_status_code(status).unwrap();
        let outgoing = response.body().unwrap();
        ResponseOutparam::set(out, Ok(response));
        let stream = outgoing.write().unwrap();
        stream.blocking_write_and_flush(body.as_bytes()).unwrap();
        drop(stream);
        OutgoingBody::finish(outgoing, None).unwrap();
        // Each request's stdout goes to the container's log.
        println!("{path} -> {status}");
    }
}

fn main() {}
