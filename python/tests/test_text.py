"""frameworm/text.py: a field's text cut to a byte bound as valid UTF-8.
Loaded from its file: it needs neither grpc nor the generated messages."""
import unittest

from module_file import load

text = load("text")


class CutUtf8Test(unittest.TestCase):
    def test_never_half_a_character(self):
        # 512 characters of 2 bytes each: 256 of them fit in 512 bytes.
        self.assertEqual(text.cut_utf8("é" * 512, 512), "é" * 256)
        # 511 ASCII bytes, then a 3-byte character that does not fit.
        self.assertEqual(text.cut_utf8("a" * 511 + "€", 512), "a" * 511)
        self.assertEqual(text.cut_utf8("ok", 512), "ok")
        for n in range(0, 12):
            out = text.cut_utf8("a€😀é" * 3, n)
            self.assertLessEqual(len(out.encode("utf-8")), n)

    def test_unencodable_characters_are_replaced(self):
        self.assertEqual(text.cut_utf8("a\udcffb", 10), "a?b")



class ErrorTextTest(unittest.TestCase):
    def test_bare_unimplemented_says_what_it_means(self):
        self.assertIn("does not have this call", text.error_text("UNIMPLEMENTED", ""))
        self.assertIn("could not parse the request", text.error_text("UNIMPLEMENTED", None))
        self.assertEqual(text.error_text("UNIMPLEMENTED", "no batches here"), "no batches here")
        self.assertEqual(text.error_text("NOT_FOUND", ""), "")


if __name__ == "__main__":
    unittest.main()
