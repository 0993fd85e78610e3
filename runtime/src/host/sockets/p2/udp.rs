//! `wasi:sockets/udp` 0.2 over the pod network's [`UdpSocket`].

use std::net::SocketAddr;

use wasmtime::component::Resource;
use wasmtime_wasi::p2::{DynPollable, subscribe};

use super::udp_bindings as udp;
use super::{IpAddressFamily, IpSocketAddress, Network, SocketError, SocketResult};
use crate::host::sockets::{Sockets, positive, socket_options};
use crate::network::udp::{IncomingDatagrams, OutgoingDatagrams, SEND_PERMITS, UdpSocket};

impl Sockets<'_> {
    fn udp(&mut self, this: &Resource<UdpSocket>) -> SocketResult<&mut UdpSocket> {
        Ok(self.table.get_mut(this)?)
    }
}

impl udp::Host for Sockets<'_> {}

impl udp::HostUdpSocket for Sockets<'_> {
    fn start_bind(
        &mut self,
        this: Resource<UdpSocket>,
        _network: Resource<Network>,
        local_address: IpSocketAddress,
    ) -> SocketResult<()> {
        let net = self.net.clone();
        Ok(self.udp(&this)?.start_bind(&net, local_address.into())?)
    }

    fn finish_bind(&mut self, this: Resource<UdpSocket>) -> SocketResult<()> {
        Ok(self.udp(&this)?.finish_bind()?)
    }

    fn stream(
        &mut self,
        this: Resource<UdpSocket>,
        remote_address: Option<IpSocketAddress>,
    ) -> SocketResult<(Resource<IncomingDatagrams>, Resource<OutgoingDatagrams>)> {
        let remote = remote_address.map(SocketAddr::from);
        let (incoming, outgoing) = self.udp(&this)?.streams(remote)?;
        let incoming = self.table.push_child(incoming, &this)?;
        let outgoing = self.table.push_child(outgoing, &this)?;
        Ok((incoming, outgoing))
    }

    fn local_address(&mut self, this: Resource<UdpSocket>) -> SocketResult<IpSocketAddress> {
        Ok(self.udp(&this)?.local_address()?.into())
    }

    fn remote_address(&mut self, this: Resource<UdpSocket>) -> SocketResult<IpSocketAddress> {
        Ok(self.udp(&this)?.remote_address()?.into())
    }

    fn address_family(&mut self, this: Resource<UdpSocket>) -> wasmtime::Result<IpAddressFamily> {
        Ok(self.table.get(&this)?.family().into())
    }

    socket_options! {
        UdpSocket, udp;
        unicast_hop_limit, set_unicast_hop_limit: hop_limit, u8, positive;
        receive_buffer_size, set_receive_buffer_size: receive_buffer, u64, positive;
        send_buffer_size, set_send_buffer_size: send_buffer, u64, positive;
    }

    fn subscribe(&mut self, this: Resource<UdpSocket>) -> wasmtime::Result<Resource<DynPollable>> {
        subscribe(self.table, this)
    }

    fn drop(&mut self, this: Resource<UdpSocket>) -> wasmtime::Result<()> {
        self.table.delete(this)?;
        Ok(())
    }
}

impl udp::HostIncomingDatagramStream for Sockets<'_> {
    fn receive(
        &mut self,
        this: Resource<IncomingDatagrams>,
        max_results: u64,
    ) -> SocketResult<Vec<udp::IncomingDatagram>> {
        let received = self
            .table
            .get(&this)?
            .receive(max_results.min(1024) as usize);
        Ok(received
            .into_iter()
            .map(|(data, remote)| udp::IncomingDatagram {
                data,
                remote_address: remote.into(),
            })
            .collect())
    }

    fn subscribe(
        &mut self,
        this: Resource<IncomingDatagrams>,
    ) -> wasmtime::Result<Resource<DynPollable>> {
        subscribe(self.table, this)
    }

    fn drop(&mut self, this: Resource<IncomingDatagrams>) -> wasmtime::Result<()> {
        self.table.delete(this)?;
        Ok(())
    }
}

impl udp::HostOutgoingDatagramStream for Sockets<'_> {
    fn check_send(&mut self, _this: Resource<OutgoingDatagrams>) -> SocketResult<u64> {
        Ok(SEND_PERMITS)
    }

    fn send(
        &mut self,
        this: Resource<OutgoingDatagrams>,
        datagrams: Vec<udp::OutgoingDatagram>,
    ) -> SocketResult<u64> {
        if datagrams.len() as u64 > SEND_PERMITS {
            return Err(SocketError::Trap(wasmtime::Error::msg(
                "send: more datagrams than check-send permitted",
            )));
        }
        let net = self.net.clone();
        let stream = self.table.get_mut(&this)?;
        let mut sent = 0;
        for datagram in datagrams {
            let to = datagram.remote_address.map(SocketAddr::from);
            match stream.send_to(&net, datagram.data, to) {
                Ok(()) => sent += 1,
                Err(e) if sent == 0 => return Err(e.into()),
                Err(_) => break,
            }
        }
        Ok(sent)
    }

    fn subscribe(
        &mut self,
        this: Resource<OutgoingDatagrams>,
    ) -> wasmtime::Result<Resource<DynPollable>> {
        subscribe(self.table, this)
    }

    fn drop(&mut self, this: Resource<OutgoingDatagrams>) -> wasmtime::Result<()> {
        self.table.delete(this)?;
        Ok(())
    }
}
