"""The Client class (see the package docstring)."""
import ipaddress
import os
import time
import zlib

import grpc
import yaml
from google.protobuf import descriptor, json_format

from frameworm import text
from frameworm.endpoint import split_endpoint
from frameworm.pem import read_pem
from frameworm.v1 import common_pb2, job_service_pb2, job_service_pb2_grpc

FINAL_STATES = ("SUCCEEDED", "FAILED", "CANCELLED")
_COORDINATOR_TLS_NAME = "frameworm-coordinator"  # rpc/tls.h kCoordinatorTlsName
# Reconnect as the daemons' channels do (rpc/rpc.cc MakeChannel): first
# retry after 200 ms and never more than 2 s apart (gRPC's default backoff
# grows to 120 s, so a restarted coordinator could wait minutes for a
# Reporter), each attempt (TCP and the TLS handshake) given at least 5 s.
_CHANNEL_OPTIONS = [("grpc.initial_reconnect_backoff_ms", 200),
                    ("grpc.min_reconnect_backoff_ms", 5000),
                    ("grpc.max_reconnect_backoff_ms", 2000)]


class FramewormError(Exception):
    """A call the coordinator refused or could not answer: `code` is the
    gRPC status code name (NOT_FOUND, INVALID_ARGUMENT, ...)."""

    def __init__(self, code, message):
        message = text.error_text(code, message)
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


def _is_loopback(host):
    if host in ("localhost",):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _secure_channel(coordinator, tls_dir):
    """A TLS channel to the coordinator with the certificate directory's
    ca.crt, tls.crt and tls.key (also the Reporter's). A directory with
    ca.crt alone (what a worker hands its trainers as FRAMEWORM_TLS_DIR)
    presents no certificate: the coordinator takes such a caller's trainer
    calls, authorized by the rank's token, and nothing else."""
    try:
        ca = read_pem(tls_dir, "ca.crt")
        if os.path.lexists(os.path.join(tls_dir, "tls.key")):
            key, cert = read_pem(tls_dir, "tls.key"), read_pem(tls_dir, "tls.crt")
        else:
            key = cert = None
    except ValueError as e:
        raise FramewormError("INVALID_ARGUMENT", str(e)) from None
    creds = grpc.ssl_channel_credentials(ca, key, cert)
    return grpc.secure_channel(coordinator, creds,
                               options=[("grpc.ssl_target_name_override", _COORDINATOR_TLS_NAME),
                                        *_CHANNEL_OPTIONS])


def _insecure_channel(coordinator):
    """A plaintext channel (loopback, or the operator asked for it)."""
    return grpc.insecure_channel(coordinator, options=_CHANNEL_OPTIONS)


_INT64_TYPES = frozenset((
    descriptor.FieldDescriptor.TYPE_INT64, descriptor.FieldDescriptor.TYPE_UINT64,
    descriptor.FieldDescriptor.TYPE_SINT64, descriptor.FieldDescriptor.TYPE_FIXED64,
    descriptor.FieldDescriptor.TYPE_SFIXED64))


def _int64s_as_ints(desc, d):
    """The 64-bit integer fields of `d` (MessageToDict of a message of
    `desc`, which writes them as strings, as JSON does) as ints again, in
    nested messages, lists and maps too."""
    for field in desc.fields:
        if field.name not in d:
            continue
        value = d[field.name]
        entry = field.message_type
        if entry is not None and entry.GetOptions().map_entry:
            key_field, value_field = entry.fields_by_name["key"], entry.fields_by_name["value"]
            out = {}
            for k, v in value.items():
                if key_field.type in _INT64_TYPES:
                    k = int(k)
                if value_field.type in _INT64_TYPES:
                    v = int(v)
                elif value_field.message_type is not None:
                    _int64s_as_ints(value_field.message_type, v)
                out[k] = v
            d[field.name] = out
        elif field.type in _INT64_TYPES:
            d[field.name] = [int(v) for v in value] if isinstance(value, list) else int(value)
        elif entry is not None:
            for v in value if isinstance(value, list) else [value]:
                if isinstance(v, dict):
                    _int64s_as_ints(entry, v)
    return d


def _as_dict(message):
    """The message as a dict keyed by proto field names; 64-bit integers
    (steps, generations, times) as ints, not JSON's strings."""
    return _int64s_as_ints(message.DESCRIPTOR,
                           json_format.MessageToDict(message, preserving_proto_field_name=True))


class Client:
    """A connection to a coordinator's JobService. An address that is not
    HOST:PORT with a port in 1..65535 raises FramewormError
    INVALID_ARGUMENT at once (frameworm/endpoint.py)."""

    def __init__(self, coordinator=None, tls_dir=None, insecure=False, timeout=10.0):
        self.coordinator = coordinator or os.environ.get("FRAMEWORM_COORDINATOR", "127.0.0.1:7070")
        tls_dir = tls_dir or os.environ.get("FRAMEWORM_TLS_DIR") or None
        self.timeout = timeout
        try:
            host, _ = split_endpoint(self.coordinator)
        except ValueError as e:
            raise FramewormError("INVALID_ARGUMENT", str(e)) from None
        if tls_dir:
            self._channel = _secure_channel(self.coordinator, tls_dir)
        elif _is_loopback(host) or insecure:
            self._channel = _insecure_channel(self.coordinator)
        else:
            raise FramewormError(
                "INVALID_ARGUMENT",
                f"{self.coordinator} is off loopback: pass tls_dir (a user certificate from "
                "`frameworm-cli admin ca issue --role user`), or insecure=True on a network "
                "only your cluster reaches")
        self._stub = job_service_pb2_grpc.JobServiceStub(self._channel)

    def close(self):
        self._channel.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _call(self, method, request):
        try:
            return method(request, timeout=self.timeout)
        except grpc.RpcError as e:
            raise FramewormError(e.code().name, e.details()) from None

    def submit(self, spec):
        """Submits a job: `spec` is a path to a job YAML file, YAML text, or a
        dict with the YAML's keys. Returns the job id. The coordinator parses
        the YAML with the CLI's own rules; a bad spec raises FramewormError
        INVALID_ARGUMENT naming the field."""
        if isinstance(spec, dict):
            text = yaml.safe_dump(spec, sort_keys=False)
        elif isinstance(spec, (str, os.PathLike)) and os.path.isfile(spec):
            with open(spec, encoding="utf-8") as f:
                text = f.read()
        elif isinstance(spec, str):
            text = spec
        else:
            raise TypeError("spec must be a dict, YAML text or a path to a YAML file")
        resp = self._call(self._stub.SubmitJob, job_service_pb2.SubmitJobRequest(spec_yaml=text))
        return resp.job_id

    def status(self, job_id):
        """The job's status as a dict (JobStatus with proto field names)."""
        return _as_dict(self._call(self._stub.GetJob, job_service_pb2.GetJobRequest(job_id=job_id)))

    def jobs(self):
        """Every job the caller may see, as dicts."""
        out, token = [], ""
        while True:
            resp = self._call(self._stub.ListJobs, job_service_pb2.ListJobsRequest(page_token=token))
            out += [_as_dict(j) for j in resp.jobs]
            if not resp.next_page_token or resp.next_page_token == token:
                return out
            token = resp.next_page_token

    def watch(self, job_id, on_update=None, timeout=None, reconnect_for=300.0):
        """Follows the job until it ends; calls on_update(status dict) for
        each update. Returns the final status dict. FramewormError
        DEADLINE_EXCEEDED after `timeout` seconds (None: no limit). A
        coordinator restart ends the stream (UNAVAILABLE, or its end before
        the job's) while the job goes on: the watch reconnects, and raises
        UNAVAILABLE only once the coordinator stayed away `reconnect_for`
        seconds."""
        deadline = None if timeout is None else time.monotonic() + timeout
        away_since = None
        while True:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            call = self._stub.WatchJob(job_service_pb2.WatchJobRequest(job_id=job_id), timeout=left)
            read_any, why = False, "its stream ended"
            try:
                for st in call:
                    read_any = True
                    d = _as_dict(st)
                    if on_update:
                        on_update(d)
                    if d.get("state") in FINAL_STATES:
                        return d
            except grpc.RpcError as e:
                if e.code() not in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED):
                    raise FramewormError(e.code().name, e.details()) from None
                why = e.details() or e.code().name
            finally:
                # Ended here (the job's end, or on_update raised): the
                # coordinator's watcher slot is freed now, not at the deadline.
                call.cancel()
            now = time.monotonic()
            if read_any or away_since is None:
                away_since = now
            if now - away_since >= reconnect_for:
                raise FramewormError("UNAVAILABLE", f"the watch of {job_id} ended before the job "
                                                    f"did and the coordinator stayed away for "
                                                    f"{reconnect_for:g} s: {why}")
            if deadline is not None and now >= deadline:
                raise FramewormError("DEADLINE_EXCEEDED", f"the watch of {job_id} timed out")
            time.sleep(min(1.0, max(0.0, reconnect_for - (now - away_since))))

    def metrics(self, job_id, since_step=0):
        """Aggregated steps after since_step as rows: step, epoch, ranks,
        samples, unix_ms (when the step's last report came), then each mean
        value by name (loss, accuracy, ...) and stragglers (a list of
        ranks)."""
        rows, token = [], ""
        while True:
            resp = self._call(self._stub.GetMetrics, job_service_pb2.GetMetricsRequest(
                job_id=job_id, since_step=since_step, page_token=token))
            for s in resp.steps:
                row = {"step": s.step, "epoch": s.epoch, "ranks": s.ranks_reported,
                       "samples": s.samples, "unix_ms": s.unix_ms}
                row.update(dict(s.mean))
                row["stragglers"] = list(s.stragglers)
                rows.append(row)
            if not resp.next_page_token or resp.next_page_token == token:
                return rows
            token = resp.next_page_token

    def events(self, job_id="", after_seq=0):
        """Lifecycle events (of the job, or every one the caller may see)
        after after_seq, as dicts, oldest first."""
        out = []
        while True:
            resp = self._call(self._stub.ListEvents, job_service_pb2.ListEventsRequest(
                job_id=job_id, after_seq=after_seq))
            out += [_as_dict(e) for e in resp.events]
            if resp.next_after_seq <= after_seq:
                return out
            after_seq = resp.next_after_seq

    def cancel(self, job_id):
        """Cancels the job; returns its status dict."""
        resp = self._call(self._stub.CancelJob, job_service_pb2.CancelJobRequest(job_id=job_id))
        return _as_dict(resp.job)

    def download_checkpoint(self, job_id, path=None, step=0, timeout=600.0):
        """Writes the coordinator's copy of the job's checkpoint of `step`
        (0: the newest disk checkpoint) to `path` (default
        ./<job>-ckpt-<step>.pt) once its size and CRC-32 match; returns the
        path. Read it with frameworm.load_checkpoint(path)."""
        call = self._stub.GetCheckpoint(
            job_service_pb2.GetCheckpointRequest(job_id=job_id, step=step), timeout=timeout)
        out = tmp = None
        crc, size, total, checksum = 0, 0, None, ""
        try:
            for chunk in call:
                if out is None:
                    total, checksum = chunk.total_bytes, chunk.checksum
                    path = path or f"{job_id}-ckpt-{chunk.step}.pt"
                    tmp = f"{path}.partial-{os.getpid()}"
                    out = open(tmp, "xb")
                crc = zlib.crc32(chunk.data, crc)
                size += len(chunk.data)
                if size > total:
                    raise FramewormError("DATA_LOSS", f"more than the {total} bytes announced")
                out.write(chunk.data)
            if out is None:
                raise FramewormError("DATA_LOSS", "the coordinator sent no data")
            out.close()
            if size != total or f"crc32:{crc:08x}" != checksum:
                raise FramewormError("DATA_LOSS", f"received {size} of {total} bytes, "
                                     f"crc32:{crc:08x} (expected {checksum})")
            os.replace(tmp, path)
            tmp = None
            return path
        except grpc.RpcError as e:
            raise FramewormError(e.code().name, e.details()) from None
        finally:
            call.cancel()  # a refused copy's stream ends now, not at the server's idle limit
            if out is not None and not out.closed:
                out.close()
            if tmp is not None and os.path.exists(tmp):
                os.remove(tmp)

    def wait(self, job_id, timeout=600.0, poll=0.5):
        """Polls until the job ends (for callers that prefer no stream)."""
        deadline = time.monotonic() + timeout
        while True:
            st = self.status(job_id)
            if st.get("state") in FINAL_STATES:
                return st
            if time.monotonic() > deadline:
                raise FramewormError("DEADLINE_EXCEEDED", f"{job_id} still {st.get('state')}")
            time.sleep(poll)


del common_pb2  # imported so its descriptors load before job_service_pb2's
