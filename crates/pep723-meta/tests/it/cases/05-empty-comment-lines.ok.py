# /// script
#
# dependencies = ["rich"]
#
# requires-python = ">=3.9"
#
# ///
