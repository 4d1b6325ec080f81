"""The kubelet simulator itself (no plugin): Register validation and restart clean-up."""

import os

import grpc
import pytest

import kubelet_sim
from kubelet_sim import pb, pb_grpc


def register(sim, **kw):
    req = dict(version="v1beta1", endpoint="x.sock", resource_name="nvidia.com/gpu")
    req.update(kw)
    with grpc.insecure_channel("unix:" + sim.socket) as ch:
        return pb_grpc.RegistrationStub(ch).Register(pb.RegisterRequest(**req), timeout=5)


@pytest.mark.parametrize("kw", [dict(version="v1alpha1"), dict(resource_name="gpu"),
                                dict(resource_name="kubernetes.io/gpu"),
                                dict(resource_name="nvidia.com/"), dict(endpoint="")])
def test_register_rejected(kubelet, kw):
    with pytest.raises(grpc.RpcError) as e:
        register(kubelet, **kw)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert kubelet.registrations == []


def test_register_dials_back(kubelet):
    """Register fails when nothing serves the endpoint: the kubelet dials back inside Register."""
    kubelet.register_timeout = 0.5
    with pytest.raises(grpc.RpcError):
        register(kubelet)
    assert kubelet.registrations == [] and len(kubelet.rejected) == 1


def test_restart_cleans_dir(kubelet, sockdir):
    for name in ("kubelet_internal_checkpoint", "a.sock", "DEPRECATION"):
        open(os.path.join(sockdir, name), "w").close()
    os.mkdir(os.path.join(sockdir, "sub"))
    kubelet.restart()
    assert sorted(os.listdir(sockdir)) == ["kubelet.sock", "kubelet_internal_checkpoint", "sub"]


def test_extended_resource_names():
    ok = ["nvidia.com/gpu", "nvidia.com/gpu.shared", "nvidia.com/mig-1g.5gb", "example.com/a_b"]
    bad = ["gpu", "nvidia.com/", "/gpu", "kubernetes.io/gpu", "nvidia.com/-x", "Nvidia.com/gpu",
           "nvidia.com/" + "x" * 64]
    assert all(kubelet_sim.valid_extended_resource_name(n) for n in ok)
    assert not any(kubelet_sim.valid_extended_resource_name(n) for n in bad)
