# /// script
# dependencies = ["rich"]
# ///
# /// script
# requires-python = ">=3.11"
# ///
