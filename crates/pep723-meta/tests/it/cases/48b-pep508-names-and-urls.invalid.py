# /// script
# dependencies = [
#     "requests_[socks]",
#     "rich[jupyter_]",
#     "pkg @ https://example.org/pkg-1.0.tar.gz",
#     "other @ ${HOME}/x",
#     "good[a, b] >= 1 ; python_version >= '3.9'",
# ]
# ///
