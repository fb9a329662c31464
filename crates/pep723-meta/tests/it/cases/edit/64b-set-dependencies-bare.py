# /// script
# requires-python = ">=3.11"
# ///
