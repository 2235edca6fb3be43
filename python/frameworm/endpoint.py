"""A coordinator address to dial, checked as the daemons and frameworm-cli
check theirs (common/node_address.h ParseHostPort and IsDialEndpoint):
HOST:PORT or [V6]:PORT with a port in 1..65535, so "host:99999" or a
forgotten port is a clear error at once instead of a call that fails
after its timeout (gRPC would dial "host" on port 443, or wrap the port).
Needs nothing but the standard library."""


def split_endpoint(address):
    """(host, port) of "HOST:PORT" or "[V6]:PORT" (brackets removed);
    ValueError naming the address when it has no host or its port is not a
    number in 1..65535."""
    shown = repr(address[:200]) if isinstance(address, str) else repr(address)
    if not isinstance(address, str):
        raise ValueError(f"coordinator address {shown} is not HOST:PORT (not a string)")
    host, colon, port = address.rpartition(":")
    if not colon or not host:
        raise ValueError(f"coordinator address {shown} is not HOST:PORT (no host)")
    if len(host) >= 2 and host[0] == "[" and host[-1] == "]":
        host = host[1:-1]
    if not (port.isascii() and port.isdigit() and len(port) <= 5 and 1 <= int(port) <= 65535):
        raise ValueError(f"coordinator address {shown} is not HOST:PORT "
                         "(the port must be 1..65535)")
    return host, int(port)
