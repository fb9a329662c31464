# /// script
# dependencies = ["rich"]
# /// end
import rich
