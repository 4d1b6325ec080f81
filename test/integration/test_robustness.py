"""Hostile or odd clients on the plugin socket; a second instance (issue 2 items 4, 7)."""

import os
import socket

import grpc
import pytest

from conftest import RESOURCE, ENDPOINT, scaled
from kubelet_sim import pb

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"


def raw(path, data, read=True):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(scaled(2))
    s.connect(path)
    try:
        s.sendall(data)
        if read:
            try:
                s.recv(65536)
            except (socket.timeout, ConnectionError):
                pass
    except (BrokenPipeError, ConnectionResetError):
        pass
    finally:
        s.close()


def still_serving(kubelet, p):
    assert kubelet.endpoint().options(timeout=scaled(3)).get_preferred_allocation_available
    u = p.inventory.uuids[0]
    assert kubelet.allocate(RESOURCE, [u]).envs["NVIDIA_VISIBLE_DEVICES"] == u
    # a fresh channel works too
    with grpc.insecure_channel("unix:" + p.socket()) as ch:
        from kubelet_sim import pb_grpc
        pb_grpc.DevicePluginStub(ch).GetDevicePluginOptions(pb.Empty(), timeout=scaled(3))
    assert p.alive()


GARBAGE = {
    "random": os.urandom(64 * 1024),
    "http1": b"GET / HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n",
    "truncated_preface": PREFACE[:10],
    "preface_then_garbage": PREFACE + os.urandom(4096),
    "huge_frame_length": PREFACE + b"\xff\xff\xff\x04\x00\x00\x00\x00\x00" + b"\x00" * 64,
    "empty": b"",
}


@pytest.mark.parametrize("kind", sorted(GARBAGE))
def test_garbage_on_plugin_socket(plugin, kubelet, kind):
    p = plugin()
    raw(p.socket(), GARBAGE[kind])
    still_serving(kubelet, p)


def test_idle_connections_do_not_block(plugin, kubelet):
    p = plugin()
    socks = []
    for _ in range(50):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(p.socket())
        socks.append(s)
    try:
        still_serving(kubelet, p)
    finally:
        for s in socks:
            s.close()
    still_serving(kubelet, p)


def test_garbage_protobuf_payload(plugin, kubelet):
    p = plugin()
    call = kubelet.endpoint().channel.unary_unary("/v1beta1.DevicePlugin/Allocate",
                                                  request_serializer=lambda b: b,
                                                  response_deserializer=lambda b: b)
    with pytest.raises(grpc.RpcError) as e:
        call(b"\xff\xff\xff\xff\x0f\x0a\x05", timeout=scaled(3))
    assert e.value.code() in (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.INTERNAL)
    still_serving(kubelet, p)


def test_unknown_method(plugin, kubelet):
    p = plugin()
    for method in ("/v1beta1.DevicePlugin/Nope", "/v1beta1.Registration/Register",
                   "/some.Other/Thing"):
        call = kubelet.endpoint().channel.unary_unary(method, request_serializer=lambda b: b,
                                                      response_deserializer=lambda b: b)
        with pytest.raises(grpc.RpcError) as e:
            call(b"", timeout=scaled(3))
        assert e.value.code() == grpc.StatusCode.UNIMPLEMENTED, method
    still_serving(kubelet, p)


def test_cancelled_streams(plugin, kubelet):
    """Many ListAndWatch streams opened and cancelled; the kubelet's stream is unaffected."""
    p = plugin()
    stub = kubelet.endpoint().stub
    for _ in range(20):
        it = stub.ListAndWatch(pb.Empty())
        first = next(it)
        assert len(first.devices) == len(p.inventory.uuids)
        it.cancel()
    still_serving(kubelet, p)
    assert not kubelet.endpoint().stream_done


def test_second_instance_refuses_to_start(plugin, kubelet):
    p1 = plugin()
    sock = p1.socket()
    ino = os.stat(sock).st_ino
    p2 = plugin(wait=None)
    rc = p2.wait_exit(5)
    assert rc != 0, "second instance must not start"
    assert os.path.exists(sock) and os.stat(sock).st_ino == ino, "live socket was taken over"
    assert len(kubelet.registrations_for(RESOURCE)) == 1
    still_serving(kubelet, p1)


def test_stale_socket_is_replaced(plugin, kubelet, sockdir):
    """A socket file nobody listens on (left by a SIGKILLed plugin) is not 'live'."""
    stale = os.path.join(sockdir, ENDPOINT)
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(stale)
    s.close()
    p = plugin()
    still_serving(kubelet, p)


def test_sigkill_then_restart(plugin, kubelet):
    p1 = plugin()
    p1.proc.kill()
    p1.proc.wait()
    p2 = plugin(wait=None)
    kubelet.wait_for(lambda: len(kubelet.registrations_for(RESOURCE)) >= 2 and
                     kubelet.endpoint().snapshots, 5, "registration of the restarted plugin")
    still_serving(kubelet, p2)
