# /// script
# dependencies = ["rich"]
# ///
# /// script
import rich
