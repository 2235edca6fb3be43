"""frameworm/pem.py: a TLS directory's files are read with a bound, so a
device in place of a certificate is refused instead of read forever."""
import os
import tempfile
import unittest

from module_file import load

pem = load("pem")


class ReadPemTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.d = self.dir.name

    def tearDown(self):
        self.dir.cleanup()

    def write(self, name, data):
        with open(os.path.join(self.d, name), "wb") as f:
            f.write(data)

    def test_a_pem_file_is_read_whole(self):
        body = b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"
        self.write("ca.crt", body)
        self.assertEqual(pem.read_pem(self.d, "ca.crt"), body)

    def test_what_is_not_pem_is_named(self):
        self.write("tls.crt", b"x")
        with self.assertRaisesRegex(ValueError, "tls.crt is not a PEM file"):
            pem.read_pem(self.d, "tls.crt")
        # Over 1 MiB, even with a PEM header in it: refused after 1 MiB.
        self.write("big.crt", b"-----BEGIN CERTIFICATE-----\n" + b"A" * (1 << 20))
        with self.assertRaisesRegex(ValueError, "big.crt is not a PEM file"):
            pem.read_pem(self.d, "big.crt")
        with self.assertRaises(FileNotFoundError):
            pem.read_pem(self.d, "tls.key")

    def test_a_device_is_not_read_forever(self):
        os.symlink("/dev/zero", os.path.join(self.d, "tls.key"))
        with self.assertRaisesRegex(ValueError, "tls.key is not a PEM file"):
            pem.read_pem(self.d, "tls.key")


if __name__ == "__main__":
    unittest.main()
