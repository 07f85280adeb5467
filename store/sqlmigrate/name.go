package sqlmigrate

// MaxNameLen is the longest table, schema or database name ValidName accepts.
const MaxNameLen = 48

// ValidName reports whether s can name a table, schema or database of a SQL backend without
// quoting surprises: 1 to MaxNameLen ASCII letters, digits and underscores, not starting with
// a digit. Backends quote it all the same.
func ValidName(s string) bool {
	if s == "" || len(s) > MaxNameLen || ('0' <= s[0] && s[0] <= '9') {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_') {
			return false
		}
	}
	return true
}
