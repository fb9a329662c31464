# /// script
# dependencies = [
#     "anyio",  # async
#     "rich",  # output
#     "zstd",  # compression
# ]
# ///
