"""`simulate --recommend`: the search over policy options (`search`), where its replays run
(`executors`), the changes the idle accounting points to (`proposals`), and the demand bound
pools are judged against."""
