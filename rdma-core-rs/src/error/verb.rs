//! The verbs and RDMA CM calls an [`Error`](super::Error) can name, and what each is called
//! in a message.

use std::fmt;

use super::kind::ErrorKind;

/// The verbs call (and the step of the connection it belongs to) that failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum VerbOp {
    /// `ibv_get_device_list`.
    ListDevices,
    /// `ibv_open_device`.
    OpenDevice,
    /// `ibv_query_device`.
    QueryDevice,
    /// `ibv_query_device_ex` (the provider's `query_device_ex`).
    QueryDeviceEx,
    /// `ibv_query_port`.
    QueryPort,
    /// `ibv_query_gid_ex` / `ibv_query_gid_table`.
    QueryGid,
    /// `ibv_alloc_pd`.
    AllocPd,
    /// `ibv_reg_mr`.
    RegMr,
    /// `ibv_dereg_mr`.
    DeregMr,
    /// `ibv_create_comp_channel` (or making its fd non-blocking).
    CreateCompChannel,
    /// `ibv_create_cq`.
    CreateCq,
    /// `ibv_create_cq_ex` (an extended CQ, which can stamp completions).
    CreateCqEx,
    /// `ibv_create_qp`.
    CreateQp,
    /// `ibv_modify_qp` RESET->INIT.
    ModifyQpInit,
    /// `ibv_modify_qp` INIT->RTR.
    ModifyQpRtr,
    /// `ibv_modify_qp` RTR->RTS.
    ModifyQpRts,
    /// `ibv_query_qp`.
    QueryQp,
    /// `ibv_post_send`.
    PostSend,
    /// `ibv_post_recv`.
    PostRecv,
    /// `ibv_poll_cq`.
    PollCq,
    /// `ibv_req_notify_cq`.
    ReqNotifyCq,
    /// `poll(2)` on the completion channel, or `ibv_get_cq_event`.
    WaitCqEvent,
    /// `rdma_create_event_channel` (or making its fd non-blocking).
    CmChannel,
    /// `rdma_create_id`.
    CmCreateId,
    /// `rdma_bind_addr`.
    CmBindAddr,
    /// `rdma_listen`.
    CmListen,
    /// `rdma_resolve_addr`.
    CmResolveAddr,
    /// `rdma_resolve_route`.
    CmResolveRoute,
    /// `rdma_connect`.
    CmConnect,
    /// `rdma_accept` (or `rdma_establish`).
    CmAccept,
    /// `rdma_init_qp_attr`.
    CmInitQpAttr,
    /// `poll(2)` on the RDMA CM event channel, or `rdma_get_cm_event`.
    CmEvent,
}

impl VerbOp {
    /// The step in words ("RTR", "register memory", ...).
    #[must_use]
    pub fn step(self) -> &'static str {
        match self {
            VerbOp::ListDevices => "listing RDMA devices",
            VerbOp::OpenDevice => "opening the RDMA device",
            VerbOp::QueryDevice => "querying the device",
            VerbOp::QueryDeviceEx => "querying the device's extended attributes",
            VerbOp::QueryPort => "querying the port",
            VerbOp::QueryGid => "reading the GID table",
            VerbOp::AllocPd => "allocating a protection domain",
            VerbOp::RegMr => "registering memory",
            VerbOp::DeregMr => "deregistering memory",
            VerbOp::CreateCompChannel => "creating a completion channel",
            VerbOp::CreateCq => "creating a completion queue",
            VerbOp::CreateCqEx => "creating an extended completion queue",
            VerbOp::CreateQp => "creating the queue pair",
            VerbOp::ModifyQpInit => "INIT",
            VerbOp::ModifyQpRtr => "RTR",
            VerbOp::ModifyQpRts => "RTS",
            VerbOp::QueryQp => "querying the queue pair",
            VerbOp::PostSend => "posting the RDMA Write",
            VerbOp::PostRecv => "posting a receive",
            VerbOp::PollCq => "polling the completion queue",
            VerbOp::ReqNotifyCq => "requesting a completion event",
            VerbOp::WaitCqEvent => "waiting for a completion event",
            VerbOp::CmChannel => "opening RDMA CM",
            VerbOp::CmCreateId => "creating an RDMA CM id",
            VerbOp::CmBindAddr => "binding RDMA CM to the local address",
            VerbOp::CmListen => "listening for RDMA CM connections",
            VerbOp::CmResolveAddr => "resolving the peer's address through RDMA CM",
            VerbOp::CmResolveRoute => "resolving the route through RDMA CM",
            VerbOp::CmConnect => "connecting through RDMA CM",
            VerbOp::CmAccept => "accepting the RDMA CM connection",
            VerbOp::CmInitQpAttr => "reading the RDMA CM queue pair attributes",
            VerbOp::CmEvent => "waiting for an RDMA CM event",
        }
    }

    /// The C call, e.g. `ibv_modify_qp INIT->RTR`.
    #[must_use]
    pub fn verb(self) -> &'static str {
        match self {
            VerbOp::ListDevices => "ibv_get_device_list",
            VerbOp::OpenDevice => "ibv_open_device",
            VerbOp::QueryDevice => "ibv_query_device",
            VerbOp::QueryDeviceEx => "ibv_query_device_ex",
            VerbOp::QueryPort => "ibv_query_port",
            VerbOp::QueryGid => "ibv_query_gid_ex",
            VerbOp::AllocPd => "ibv_alloc_pd",
            VerbOp::RegMr => "ibv_reg_mr",
            VerbOp::DeregMr => "ibv_dereg_mr",
            VerbOp::CreateCompChannel => "ibv_create_comp_channel",
            VerbOp::CreateCq => "ibv_create_cq",
            VerbOp::CreateCqEx => "ibv_create_cq_ex",
            VerbOp::CreateQp => "ibv_create_qp",
            VerbOp::ModifyQpInit => "ibv_modify_qp RESET->INIT",
            VerbOp::ModifyQpRtr => "ibv_modify_qp INIT->RTR",
            VerbOp::ModifyQpRts => "ibv_modify_qp RTR->RTS",
            VerbOp::QueryQp => "ibv_query_qp",
            VerbOp::PostSend => "ibv_post_send",
            VerbOp::PostRecv => "ibv_post_recv",
            VerbOp::PollCq => "ibv_poll_cq",
            VerbOp::ReqNotifyCq => "ibv_req_notify_cq",
            VerbOp::WaitCqEvent => "ibv_get_cq_event",
            VerbOp::CmChannel => "rdma_create_event_channel",
            VerbOp::CmCreateId => "rdma_create_id",
            VerbOp::CmBindAddr => "rdma_bind_addr",
            VerbOp::CmListen => "rdma_listen",
            VerbOp::CmResolveAddr => "rdma_resolve_addr",
            VerbOp::CmResolveRoute => "rdma_resolve_route",
            VerbOp::CmConnect => "rdma_connect",
            VerbOp::CmAccept => "rdma_accept",
            VerbOp::CmInitQpAttr => "rdma_init_qp_attr",
            VerbOp::CmEvent => "rdma_get_cm_event",
        }
    }

    pub(super) fn kind(self) -> ErrorKind {
        match self {
            VerbOp::ListDevices | VerbOp::OpenDevice => ErrorKind::NoDevice,
            VerbOp::QueryDevice | VerbOp::QueryDeviceEx | VerbOp::QueryPort | VerbOp::QueryGid => {
                ErrorKind::Port
            }
            VerbOp::PostSend | VerbOp::PostRecv | VerbOp::PollCq | VerbOp::WaitCqEvent => {
                ErrorKind::Transfer
            }
            _ => ErrorKind::Setup,
        }
    }
}

impl fmt::Display for VerbOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.verb())
    }
}
