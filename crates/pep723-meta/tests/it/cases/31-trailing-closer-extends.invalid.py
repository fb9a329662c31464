# /// script
# dependencies = ["rich"]
# ///
# a comment
# ///
import rich
