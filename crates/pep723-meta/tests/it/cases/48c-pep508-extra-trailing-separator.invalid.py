# /// script
# dependencies = [
#     "rich[jupyter_",
#     "rich[jupyter_ ,x]",
# ]
# ///
