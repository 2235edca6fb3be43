"""frameworm/endpoint.py: a coordinator address is HOST:PORT with a port
in 1..65535, the daemons' rule, checked before anything is dialled."""
import unittest

from module_file import load

endpoint = load("endpoint")


class SplitEndpointTest(unittest.TestCase):
    def test_host_and_port(self):
        self.assertEqual(endpoint.split_endpoint("127.0.0.1:7070"), ("127.0.0.1", 7070))
        self.assertEqual(endpoint.split_endpoint("coord.example:1"), ("coord.example", 1))
        self.assertEqual(endpoint.split_endpoint("[::1]:65535"), ("::1", 65535))

    def test_bad_addresses_are_named(self):
        for address, why in [
            ("127.0.0.1", "no host"),  # no colon: the whole text is no HOST:PORT
            (":7070", "no host"),
            ("127.0.0.1:99999", "the port must be 1..65535"),
            ("127.0.0.1:0", "the port must be 1..65535"),
            ("127.0.0.1:", "the port must be 1..65535"),
            ("127.0.0.1:+80", "the port must be 1..65535"),
            ("127.0.0.1:８０", "the port must be 1..65535"),  # full-width digits
            ("h:" + "1" * 400, "the port must be 1..65535"),
        ]:
            with self.assertRaises(ValueError, msg=address) as caught:
                endpoint.split_endpoint(address)
            self.assertIn(why, str(caught.exception))
            self.assertIn(repr(address[:200]), str(caught.exception))
            self.assertLess(len(str(caught.exception)), 300)

    def test_a_non_string_is_refused(self):
        with self.assertRaises(ValueError):
            endpoint.split_endpoint(7070)


if __name__ == "__main__":
    unittest.main()
