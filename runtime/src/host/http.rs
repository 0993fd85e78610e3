//! `wasi:http` in a component's store: the context wasmtime-wasi-http keeps, and where the
//! guest's outgoing requests go.

use std::sync::Arc;

use http_body_util::BodyExt;
use wasmtime_wasi_http::{Error, RequestOptions, WasiBody, WasiHttpHooks};

use crate::network::PodNetwork;
use crate::network::http::Sent;

/// Where a store's outgoing `wasi:http` requests go.
pub(crate) enum Outgoing {
    /// Through the pod network, as its sockets do.
    Pod(Arc<PodNetwork>),
    /// Through the host's network (a task run by the containerd shim).
    Host,
}

impl WasiHttpHooks for Outgoing {
    fn send_request(
        &mut self,
        request: http::Request<WasiBody>,
        options: Option<RequestOptions>,
        _fut: Box<dyn Future<Output = Result<(), Error>> + Send>,
    ) -> Box<dyn Future<Output = Result<Sent, Error>> + Send> {
        match self {
            Outgoing::Pod(net) => {
                Box::new(crate::network::http::send(net.clone(), request, options))
            }
            Outgoing::Host => Box::new(async move {
                let (response, io) =
                    wasmtime_wasi_http::default_send_request(request, options).await?;
                Ok((
                    response.map(BodyExt::boxed_unsync),
                    Box::new(io) as Box<dyn Future<Output = _> + Send>,
                ))
            }),
        }
    }
}
