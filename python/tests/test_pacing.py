"""frameworm/pacing.py: when a Reporter's sender makes its next report
call. Loaded from its file: it needs neither grpc nor the generated
messages."""
import unittest

from module_file import load

pacing = load("pacing")


class SendPacerTest(unittest.TestCase):
    def test_the_first_report_goes_at_once_then_one_call_per_interval(self):
        p = pacing.SendPacer(0.05, 64)
        self.assertIsNone(p.wait(0, 100.0), "nothing queued: wait for a report")
        self.assertEqual(p.wait(1, 100.0), 0.0)
        p.called(100.0)
        self.assertAlmostEqual(p.wait(3, 100.01), 0.04)
        self.assertAlmostEqual(p.wait(30, 100.049), 0.001)
        self.assertEqual(p.wait(30, 100.05), 0.0)
        p.called(100.05)
        # A quiet spell longer than the interval: the next report goes at once.
        self.assertEqual(p.wait(1, 101.0), 0.0)

    def test_a_full_batch_or_an_urgent_send_does_not_wait(self):
        p = pacing.SendPacer(60.0, 8)
        p.called(0.0)
        self.assertAlmostEqual(p.wait(7, 1.0), 59.0)
        self.assertEqual(p.wait(8, 1.0), 0.0)
        self.assertEqual(p.wait(1, 1.0, urgent=True), 0.0)
        self.assertIsNone(p.wait(0, 1.0, urgent=True), "urgent with nothing queued: nothing to send")

    def test_only_an_idle_sender_or_a_full_batch_is_woken(self):
        p = pacing.SendPacer(0.05, 8)
        self.assertTrue(p.wakes_sender(0))
        for before in range(1, 7):
            self.assertFalse(p.wakes_sender(before), before)
        self.assertTrue(p.wakes_sender(7))

    def test_no_interval_sends_as_soon_as_the_last_call_returned(self):
        p = pacing.SendPacer(0, 64)
        p.called(5.0)
        self.assertEqual(p.wait(1, 5.0), 0.0)

    def test_bad_settings_are_named(self):
        for bad in (-0.1, 61, float("nan"), "soon", None):
            with self.assertRaisesRegex(ValueError, "report interval"):
                pacing.SendPacer(bad)
        for bad in (0, -1, 2.5):
            with self.assertRaisesRegex(ValueError, "batch size"):
                pacing.SendPacer(0.05, bad)


if __name__ == "__main__":
    unittest.main()
