# /// script
# requires-python = 3
# ///
