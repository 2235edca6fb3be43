"""frameworm/cadence.py: the in-memory checkpoint schedule a Python
entrypoint's rank 0 follows (Directive.memory_checkpoint). Loaded from its
file: it needs neither grpc nor the generated messages."""
import math
import unittest

from module_file import load

cadence = load("cadence")


class ParseEveryTest(unittest.TestCase):
    def test_values(self):
        self.assertIsNone(cadence.parse_every(None))
        self.assertIsNone(cadence.parse_every(""))
        self.assertEqual(cadence.parse_every("auto"), 0)
        self.assertEqual(cadence.parse_every("25"), 25)
        self.assertEqual(cadence.parse_every("1000000000"), 10 ** 9)

    def test_bad_values_name_the_variable(self):
        for bad in ("0", "-4", "1000000001", "often", "2.5"):
            with self.assertRaises(ValueError) as e:
                cadence.parse_every(bad)
            self.assertIn("FRAMEWORM_MEMORY_CHECKPOINT_EVERY", str(e.exception))
            self.assertIn(repr(bad), str(e.exception))


class MemoryCadenceTest(unittest.TestCase):
    def test_every_n_steps(self):
        c = cadence.MemoryCadence(5)
        due = [s for s in range(0, 21) if c.due(s)]
        self.assertEqual(due, [5, 10, 15, 20])
        c.saved(5, 100.0)  # a costly save does not move a fixed cadence
        self.assertTrue(c.due(10))
        self.assertEqual(c.interval(), 5)

    def test_automatic_keeps_the_cost_within_two_percent(self):
        c = cadence.MemoryCadence(0)
        for _ in range(50):
            c.observe_step(0.030)           # 30 ms steps
        self.assertTrue(c.due(1))           # the first at once
        self.assertIsNone(c.interval())
        c.saved(1, 0.0119)                  # a 11.9 ms save: 2% of 19.8 steps
        self.assertEqual(c.interval(), 20)
        self.assertFalse(c.due(20))
        self.assertTrue(c.due(21))
        # Over a long run the saves cost at most 2% of the training time.
        step, saved_cost, steps = 21, 0.0, 0
        while step < 2000:
            if c.due(step):
                c.saved(step, 0.012)
                saved_cost += 0.012
            c.observe_step(0.030)
            steps += 1
            step += 1
        self.assertLessEqual(saved_cost / (steps * 0.030), cadence.BUDGET + 1e-9)
        self.assertGreater(saved_cost / (steps * 0.030), 0.8 * cadence.BUDGET)

    def test_automatic_never_more_often_than_every_ten_steps(self):
        c = cadence.MemoryCadence(0)
        c.observe_step(1.0)
        c.saved(7, 0.0)
        self.assertFalse(c.due(16))
        self.assertTrue(c.due(17))

    def test_it_stays_due_until_taken(self):
        c = cadence.MemoryCadence(0)
        c.observe_step(0.01)
        c.saved(1, 0.001)
        self.assertEqual([c.due(s) for s in (10, 11, 12, 13)], [False, True, True, True])

    def test_step_times_follow_a_moving_average(self):
        c = cadence.MemoryCadence(0)
        c.observe_step(0.1)
        c.observe_step(0.2)
        self.assertTrue(math.isclose(c.mean_step_seconds, 0.11))
        for bad in (0, -1, float("nan"), float("inf")):
            c.observe_step(bad)                 # ignored
        self.assertTrue(math.isclose(c.mean_step_seconds, 0.11))
        c.saved(1, float("nan"))                # a broken cost counts as free
        self.assertEqual(c.interval(), cadence.MIN_INTERVAL)

    def test_bad_interval_is_refused(self):
        for bad in (-1, 10 ** 9 + 1):
            with self.assertRaises(ValueError):
                cadence.MemoryCadence(bad)


if __name__ == "__main__":
    unittest.main()
