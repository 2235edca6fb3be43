"""frameworm/checkpoint.py: read_payload checks a checkpoint file's header,
size and CRC before it hands the archive over, and reads nothing it need not."""
import os
import struct
import tempfile
import unittest
import zlib

from module_file import load

checkpoint = load("checkpoint")


def framed(payload, length=None, crc=None):
    n = len(payload) if length is None else length
    c = zlib.crc32(payload) if crc is None else crc
    return struct.pack("<8sQII", b"FWCKPT01", n, c, 0) + payload


class ReadPayloadTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()

    def tearDown(self):
        self.dir.cleanup()

    def write(self, name, data):
        path = os.path.join(self.dir.name, name)
        with open(path, "wb") as f:
            f.write(data)
        return path

    def refused(self, path, text):
        with self.assertRaises(checkpoint.CheckpointError) as e:
            checkpoint.read_payload(path)
        self.assertIn(text, str(e.exception))

    def test_an_intact_file_gives_its_payload(self):
        payload = os.urandom(100_000)
        self.assertEqual(checkpoint.read_payload(self.write("ok.pt", framed(payload))), payload)

    def test_damaged_files_are_refused(self):
        payload = b"archive" * 1000
        self.refused(self.write("short.pt", b"FWC"), "shorter than the 24-byte header")
        self.refused(self.write("magic.pt", b"X" * 8 + framed(payload)[8:]), "not a Frameworm")
        self.refused(self.write("cut.pt", framed(payload)[:-1]),
                     f"the header says {len(payload)} payload bytes, the file has {len(payload) - 1}")
        self.refused(self.write("pad.pt", framed(payload) + b"\0"), "truncated or padded")
        self.refused(self.write("crc.pt", framed(payload, crc=1)), "CRC-32 does not match")
        # A header announcing 2**62 bytes: refused from the file's size.
        self.refused(self.write("huge.pt", framed(payload, length=1 << 62)),
                     f"the header says {1 << 62} payload bytes")

    def test_a_device_is_not_read(self):
        # /dev/zero used to be read until memory ran out.
        self.refused("/dev/zero", "not a regular file")


if __name__ == "__main__":
    unittest.main()
