"""Kubernetes' protobuf encoding of LIST answers for the fake API server.

Encodes nodes, pods and configmaps (and error Statuses) with the fields of
proto/k8s_list.proto -- the subset kubectl-gpupool decodes -- the way an
apiserver answers `Accept: application/vnd.kubernetes.protobuf`: "k8s\\0" +
runtime.Unknown{typeMeta, raw = the List}. The Python module is generated
from that .proto on first use with grpc_tools' protoc (Debian
python3-grpc-tools), into a temporary directory.
"""

import importlib
import os
import sys
import tempfile
import threading

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
PROTO = os.path.join(ROOT, "proto", "k8s_list.proto")
MAGIC = b"k8s\x00"
CONTENT_TYPE = "application/vnd.kubernetes.protobuf"
ITEM_OF_LIST = {"NodeList": "Node", "PodList": "Pod", "ConfigMapList": "ConfigMap"}

_lock = threading.Lock()
_module = None


def pb2():
    """The generated k8s_list_pb2 module (generated once per process)."""
    global _module
    with _lock:
        if _module is None:
            from grpc_tools import protoc
            out = tempfile.mkdtemp(prefix="k8s-pb2-")
            rc = protoc.main(["protoc", "--proto_path=" + os.path.dirname(PROTO),
                              "--python_out=" + out, PROTO])
            if rc != 0:
                raise RuntimeError("protoc failed on %s" % PROTO)
            sys.path.insert(0, out)
            _module = importlib.import_module("k8s_list_pb2")
        return _module


def _scalar(field, value):
    return str(value) if field.type == field.TYPE_STRING else value


def fill(msg, obj):
    """Copies the fields of a JSON object that msg's type declares into msg."""
    for field in msg.DESCRIPTOR.fields:
        if field.name not in obj or obj[field.name] is None:
            continue
        value = obj[field.name]
        target = getattr(msg, field.name)
        if field.message_type is not None and field.message_type.GetOptions().map_entry:
            value_field = field.message_type.fields_by_name["value"]
            for k, v in value.items():
                if value_field.message_type is not None:
                    fill_value(target[k], v)
                else:
                    target[k] = _scalar(value_field, v)
        elif field.label == field.LABEL_REPEATED:
            for v in value:
                if field.message_type is not None:
                    fill_value(target.add(), v)
                else:
                    target.append(_scalar(field, v))
        elif field.message_type is not None:
            target.SetInParent()
            fill_value(target, value)
        else:
            setattr(msg, field.name, _scalar(field, value))
    return msg


def fill_value(msg, value):
    if msg.DESCRIPTOR.name == "Quantity":   # JSON writes a Quantity as its string
        msg.string = str(value)
    else:
        fill(msg, value)


def _envelope(env_type, kind, raw):
    env = env_type()
    env.typeMeta.apiVersion = "v1"
    env.typeMeta.kind = kind
    env.raw.CopyFrom(raw)
    return MAGIC + env.SerializeToString(deterministic=True)


def encode_list(list_kind, items, meta):
    """A NodeList/PodList/ConfigMapList answer; items are JSON objects."""
    m = pb2()
    item_type = getattr(m, ITEM_OF_LIST[list_kind])
    lst = m.List()
    for key in ("resourceVersion", "continue"):
        if meta.get(key):
            setattr(lst.metadata, key, meta[key])
    for obj in items:
        lst.items.append(fill(item_type(), obj).SerializeToString(deterministic=True))
    return _envelope(m.ListEnvelope, list_kind, lst)


def encode_status(status):
    """A meta/v1 Status (JSON object) as a protobuf error answer."""
    m = pb2()
    return _envelope(m.StatusEnvelope, "Status", fill(m.Status(), status))


def decode_list(data):
    """(kind, [item message...], ListMeta) of an answer encode_list made."""
    m = pb2()
    assert data[:4] == MAGIC
    env = m.ListEnvelope.FromString(data[4:])
    item_type = getattr(m, ITEM_OF_LIST[env.typeMeta.kind])
    return (env.typeMeta.kind, [item_type.FromString(b) for b in env.raw.items],
            env.raw.metadata)
