//! `wasi:sockets/types.udp-socket` 0.3: the pod network's UDP sockets, one datagram per call.

use std::future::poll_fn;
use std::net::SocketAddr;

use wasmtime::component::{Accessor, Resource};

use super::bindings::wasi::sockets::types::{
    HostUdpSocket, HostUdpSocketWithStore, IpAddressFamily, IpSocketAddress,
};
use super::{PodSockets, SocketResult};
use crate::host::sockets::{Sockets, positive, socket_options};
use crate::network::error::ErrorCode as Code02;
use crate::network::udp::UdpSocket;

impl Sockets<'_> {
    fn udp3(&mut self, this: &Resource<UdpSocket>) -> SocketResult<&mut UdpSocket> {
        Ok(self.table.get_mut(this)?)
    }
}

impl<T> HostUdpSocketWithStore<T> for PodSockets {
    async fn send(
        store: &Accessor<T, Self>,
        this: Resource<UdpSocket>,
        data: Vec<u8>,
        remote_address: Option<IpSocketAddress>,
    ) -> SocketResult<()> {
        store.with(|mut view| {
            let view = view.get();
            let net = view.net.clone();
            let to = remote_address.map(SocketAddr::from);
            Ok(view.table.get_mut(&this)?.send(&net, data, to)?)
        })
    }

    async fn receive(
        store: &Accessor<T, Self>,
        this: Resource<UdpSocket>,
    ) -> SocketResult<(Vec<u8>, IpSocketAddress)> {
        let (inbox, from) = store.with(|mut view| -> SocketResult<_> {
            let socket = view.get().table.get_mut(&this)?;
            Ok(socket.receiving().ok_or(Code02::InvalidState)?)
        })?;
        loop {
            if let Some((data, remote)) = inbox.take_one(from) {
                return Ok((data, remote.into()));
            }
            poll_fn(|cx| inbox.poll_ready(cx)).await;
        }
    }
}

impl HostUdpSocket for Sockets<'_> {
    fn create(&mut self, family: IpAddressFamily) -> SocketResult<Resource<UdpSocket>> {
        let charge = self
            .budget
            .reserve(UdpSocket::BUDGET)
            .ok_or(Code02::OutOfMemory)?;
        Ok(self.table.push(UdpSocket::new(family.into(), charge))?)
    }

    fn bind(
        &mut self,
        this: Resource<UdpSocket>,
        local_address: IpSocketAddress,
    ) -> SocketResult<()> {
        let net = self.net.clone();
        Ok(self.udp3(&this)?.bind(&net, local_address.into())?)
    }

    fn connect(
        &mut self,
        this: Resource<UdpSocket>,
        remote_address: IpSocketAddress,
    ) -> SocketResult<()> {
        let net = self.net.clone();
        let socket = self.udp3(&this)?;
        let remote = SocketAddr::from(remote_address);
        socket.set_remote(Some(remote))?;
        Ok(socket.bind_implicitly(&net, Some(remote))?)
    }

    fn disconnect(&mut self, this: Resource<UdpSocket>) -> SocketResult<()> {
        let socket = self.udp3(&this)?;
        socket.remote_address()?;
        Ok(socket.set_remote(None)?)
    }

    fn get_local_address(&mut self, this: Resource<UdpSocket>) -> SocketResult<IpSocketAddress> {
        Ok(self.udp3(&this)?.local_address()?.into())
    }

    fn get_remote_address(&mut self, this: Resource<UdpSocket>) -> SocketResult<IpSocketAddress> {
        Ok(self.udp3(&this)?.remote_address()?.into())
    }

    fn get_address_family(
        &mut self,
        this: Resource<UdpSocket>,
    ) -> wasmtime::Result<IpAddressFamily> {
        Ok(self.table.get(&this)?.family().into())
    }

    socket_options! {
        UdpSocket, udp3;
        get_unicast_hop_limit, set_unicast_hop_limit: hop_limit, u8, positive;
        get_receive_buffer_size, set_receive_buffer_size: receive_buffer, u64, positive;
        get_send_buffer_size, set_send_buffer_size: send_buffer, u64, positive;
    }

    fn drop(&mut self, this: Resource<UdpSocket>) -> wasmtime::Result<()> {
        self.table.delete(this)?;
        Ok(())
    }
}
