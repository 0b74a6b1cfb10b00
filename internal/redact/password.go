package redact

import (
	"net/url"
	"regexp"
	"strings"
)

// Hidden replaces a password that Password hides.
const Hidden = "xxxxx"

// passwordKeys are the connection parameters whose value is a secret: libpq's (and pgx's)
// password, and sslpassword, the passphrase of the client key. They are matched without regard
// to case.
var passwordKeys = []string{"password", "sslpassword"}

func isPasswordKey(k string) bool {
	for _, p := range passwordKeys {
		if strings.EqualFold(k, p) {
			return true
		}
	}
	return false
}

// dsnPassword matches a password parameter of a libpq key=value connection string
// ("host=db password='s3 cr3t'"): the key, the "=" with any spaces around it, and the value, a
// quoted string (backslash escapes; an unterminated quote runs to the end) or a run of non-spaces.
var dsnPassword = regexp.MustCompile(`(?i)(^|\s)((?:ssl)?password\s*=\s*)('(?:[^'\\]|\\.)*'?|\S*)`)

// Password returns raw, a URL such as a store's or a libpq key=value connection string, with
// every password in it replaced by Hidden: the userinfo's (postgres://user:pw@host) and the
// values of the password and sslpassword parameters, in a URL's query or in key=value form. The
// rest is kept as written. A string that looks like a URL ("…://…") but does not parse is
// replaced whole, since it might hold a secret anywhere.
func Password(raw string) string {
	s, _ := password(raw)
	return s
}

// HasPassword reports whether raw carries a password that Password hides. A string that looks
// like a URL but does not parse has none it can tell.
func HasPassword(raw string) bool {
	_, found := password(raw)
	return found
}

// password is Password, and whether it found a password to hide.
func password(raw string) (string, bool) {
	u, err := url.Parse(raw)
	switch {
	case err == nil && u.Scheme != "":
		c := *u
		found := false
		if c.User != nil {
			if _, set := c.User.Password(); set {
				c.User = url.UserPassword(c.User.Username(), Hidden)
				found = true
			}
		}
		q, inQuery := hideQueryPasswords(c.RawQuery)
		c.RawQuery = q
		return c.String(), found || inQuery
	case err != nil && strings.Contains(raw, "://"):
		return "[unparsable URL]", false
	default:
		found := false
		s := dsnPassword.ReplaceAllStringFunc(raw, func(m string) string {
			g := dsnPassword.FindStringSubmatch(m)
			if g[3] == "" {
				return m
			}
			found = true
			return g[1] + g[2] + Hidden
		})
		return s, found
	}
}

// hideQueryPasswords replaces the value of every password parameter of a raw query, and reports
// whether there was one. Parameters are separated by "&" or ";" (a parser may split on either),
// and a key is compared unescaped, so "pass%77ord" is a password too.
func hideQueryPasswords(q string) (string, bool) {
	if q == "" {
		return q, false
	}
	var b strings.Builder
	found := false
	for q != "" {
		i := strings.IndexAny(q, "&;")
		param, sep := q, ""
		if i >= 0 {
			param, sep, q = q[:i], q[i:i+1], q[i+1:]
		} else {
			q = ""
		}
		key, value, hasValue := strings.Cut(param, "=")
		if k, err := url.QueryUnescape(key); err == nil {
			key = k
		}
		if hasValue && value != "" && isPasswordKey(key) {
			param = param[:len(param)-len(value)] + Hidden
			found = true
		}
		b.WriteString(param)
		b.WriteString(sep)
	}
	return b.String(), found
}
