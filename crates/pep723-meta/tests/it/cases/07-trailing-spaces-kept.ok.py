# /// script
# [tool.demo]
# s = """
# keep   
# """   
# ///
