# /// script
# requires-python = ">=3.11"
# dependencies = [
#   "requests<3",
#   "rich",
# ]
# ///

import rich

# /// script
# dependencies = ["httpx"]
# ///
