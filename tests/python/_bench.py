"""Shared by the bench package's tests: a command's main() called in-process."""

import contextlib
import io


def call(main, argv):
    """(exit status, stdout, stderr) of MAIN(argv); argparse's exits are exit statuses."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = main(list(argv))
        except SystemExit as e:
            rc = e.code if isinstance(e.code, int) else 1
            err.write(str(e.code))
    return rc, out.getvalue(), err.getvalue()
