"""`simulate --recommend`: the policy changes the idle accounting points to (`proposals`),
and the demand bound they are judged against."""
