package zmqevents

import (
	"fmt"
	"strconv"
)

func wrapField(name string, err error) error {
	if name == "" {
		return err
	}
	return fmt.Errorf("%s: %w", name, err)
}

func itoa(i int) string { return strconv.Itoa(i) }

func fmtTag(tag []byte) error {
	if len(tag) > 40 {
		tag = tag[:40]
	}
	return fmt.Errorf("%w %q", ErrUnknownEventType, tag)
}
