package sqlitestore_test

const childEnv = "IDEM_SQLITESTORE_CHILD"

func child() int { return 0 }
