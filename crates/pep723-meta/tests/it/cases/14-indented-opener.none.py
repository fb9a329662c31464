if True:
    # /// script
    # dependencies = []
    # ///
    pass
