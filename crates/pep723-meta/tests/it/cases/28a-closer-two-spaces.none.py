# /// script
# dependencies = ["rich"]
#  ///
import rich
