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
	return fmt.Errorf("%w %q", ErrUnknownEventType, clipTag(tag))
}

// clipTag bounds an unknown type tag kept for logging.
func clipTag(tag []byte) string {
	if len(tag) > 40 {
		tag = tag[:40]
	}
	if len(tag) == 0 {
		return `""`
	}
	return string(tag)
}
