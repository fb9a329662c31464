DOC = """
# /// script
# dependencies = ["evil"]
# ///
"""

# /// script
# dependencies = ["rich"]
# ///
