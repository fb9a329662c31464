# /// script
# dependencies = [
#     # networking
#     "httpx",
#     # output
#     "rich",
# ]
# ///
