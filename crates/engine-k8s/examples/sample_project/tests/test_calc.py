"""The calculator's tests; one of them checks that it runs inside the sandbox."""

import os
import unittest

import calc


class CalcTest(unittest.TestCase):
    def test_add(self):
        self.assertEqual(calc.add(2, 3), 5)

    def test_mean(self):
        self.assertEqual(calc.mean([1, 2, 3, 6]), 3)

    def test_mean_of_nothing(self):
        with self.assertRaises(ValueError):
            calc.mean([])

    def test_home_is_not_the_hosts(self):
        # The sandbox hides the host's home: no ~/.ssh in here.
        self.assertFalse(os.path.exists(os.path.expanduser("~/.ssh/id_rsa")))


if __name__ == "__main__":
    unittest.main()
