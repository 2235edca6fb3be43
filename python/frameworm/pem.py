"""A TLS directory's PEM files (ca.crt, tls.crt, tls.key), read with the
daemons' bound (rpc/tls.cc): at most 1 MiB each, so a device in place of a
file (/dev/zero) is refused instead of read forever. Needs nothing but the
standard library."""
import os

MAX_PEM_BYTES = 1 << 20


def read_pem(tls_dir, name):
    """The bytes of tls_dir/name; ValueError naming the file when it is not
    PEM or is over MAX_PEM_BYTES; OSError when it cannot be read."""
    path = os.path.join(tls_dir, name)
    with open(path, "rb") as f:
        data = f.read(MAX_PEM_BYTES + 1)
    if len(data) > MAX_PEM_BYTES or b"-----BEGIN " not in data:
        raise ValueError(f"{path} is not a PEM file")
    return data
