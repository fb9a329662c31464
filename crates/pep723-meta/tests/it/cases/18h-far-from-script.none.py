# /// strictly
# a = 1
# ///

# /// config
# b = 2
# ///

# /// transcript
# c = 3
# ///
