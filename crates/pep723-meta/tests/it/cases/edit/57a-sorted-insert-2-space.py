# /// script
# dependencies = [
#   "anyio",
#   "rich",  # pretty output
# ]
# ///
import rich
