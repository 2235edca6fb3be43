"""frameworm/step_values.py: a step's metrics checked as the coordinator
checks them. Loaded from its file: it needs neither grpc nor the messages."""
import unittest

from module_file import load

step_values = load("step_values")


class CheckedValuesTest(unittest.TestCase):
    def test_values_the_coordinator_refuses_are_left_out(self):
        got = step_values.checked_values({"loss": 0.5, "ppl": 1e300, "nan": float("nan"),
                                          "inf": float("-inf"), "n": 3, "edge": -1e200})
        self.assertEqual(got, {"loss": 0.5, "n": 3.0, "edge": -1e200})

    def test_names_and_counts_it_refuses_are_errors(self):
        for bad in ("x" * 65, "", "a\nb", "a\x1b[2J", "a\x9b", "é" * 33):
            with self.assertRaises(ValueError, msg=repr(bad)):
                step_values.checked_values({bad: 1.0})
        with self.assertRaisesRegex(ValueError, "at most 64 metrics, got 65"):
            step_values.checked_values({f"m{i}": 1.0 for i in range(65)})
        self.assertEqual(len(step_values.checked_values({"x" * 64: 1.0, "é" * 32: 2.0})), 2)

    def test_a_value_that_is_not_a_number_is_an_error(self):
        with self.assertRaises((TypeError, ValueError)):
            step_values.checked_values({"loss": "high"})


if __name__ == "__main__":
    unittest.main()
