# The course's nbgrader configuration: one file for the instructor's CLI, the demo and the tests.
#
#   solutions/  = nbgrader's source directory (instructor notebooks, the single source of truth)
#   exercises/  = nbgrader's release directory (generated, committed, opened by students)
#   build/course (git-ignored) = the course root: submitted/, autograded/, feedback/, gradebook.db
#
# Environment overrides (used by the demo, the tests and the cohort tools):
#   AWB_COURSE_ROOT, AWB_RELEASE_DIR, AWB_DB_URL, AWB_CELL_TIMEOUT
import os
import sys
from pathlib import Path

c = get_config()  # noqa: F821 - provided by traitlets when it loads this file

_REPO = Path(__file__).resolve().parent.parent
if str(_REPO / "autograder") not in sys.path:       # (formgrader and plain `nbgrader` import the grader from here)
    sys.path.insert(0, str(_REPO / "autograder"))

c.CourseDirectory.course_id = "attention-workbook"
c.CourseDirectory.root = os.environ.get("AWB_COURSE_ROOT", str(_REPO / "build" / "course"))
c.CourseDirectory.source_directory = str(_REPO / "solutions")
c.CourseDirectory.release_directory = os.environ.get("AWB_RELEASE_DIR", str(_REPO / "exercises"))
if os.environ.get("AWB_DB_URL"):
    c.CourseDirectory.db_url = os.environ["AWB_DB_URL"]  # default: sqlite gradebook.db in the course root
# nbgrader's exchange (JupyterHub release/collect) is not used; keep it inside the course root
c.Exchange.root = os.path.join(c.CourseDirectory.root, "exchange")
c.CourseDirectory.ignore = [".ipynb_checkpoints", "*.pyc", "__pycache__", "feedback", ".git"]

# PyTorch cells (imports, small training runs) need more than nbgrader's default 30 s.
# A cell that runs past the limit is interrupted and marked as an error; the batch goes on.
c.Execute.timeout = int(os.environ.get("AWB_CELL_TIMEOUT", "120"))
c.Execute.interrupt_on_timeout = True
c.Execute.startup_timeout = 120

# A student who deletes a test cell still has it run (and loses its points honestly).
c.OverwriteCells.add_missing_cells = True

# Every autograde, whichever way it is started (nbgrader autograde, formgrader's button, the
# cohort command), runs the student's notebook in the bubblewrap sandbox and takes points only from
# verdicts reached outside the student's process: awb_grader/core/config.py (kernel spec, kernel
# manager, autograde preprocessors). Without bubblewrap it refuses, unless told the grades may be
# unprotected (AWB_UNPROTECTED=1 or --SandboxGuard.unprotected=True).
from awb_grader.core.config import configure as _protect  # noqa: E402

_protect(c)

# `nbgrader zip_collect` opens the LMS download only, under limits; a student's uploaded archive is
# never unpacked (awb_grader/cohort/uploads.py; the cohort command sets the same extractor).
c.ZipCollectApp.extractor_plugin = "awb_grader.cohort.uploads.SafeExtractor"

# Grading kernels talk to nbgrader over local TCP. ipykernel >= 7.4 supports CurveZMQ encryption
# of that channel and warns on every start when it is off ("Kernel is running over TCP without
# encryption"): let jupyter_client provision the keys where both sides support it. (The sandbox's
# kernels use Unix sockets instead: KernelManager.transport = "ipc", see core/config.py.)
def _curve_available() -> bool:
    try:
        import zmq
        from jupyter_client.manager import KernelManager
    except ImportError:
        return False
    return zmq.has("curve") and "transport_encryption" in KernelManager.class_trait_names()


if _curve_available():
    c.KernelManager.transport_encryption = "auto"  # only kernels whose kernelspec declares support

# A student's outputs run nowhere: every HTML page nbgrader makes of a submission (formgrader's
# manual grading, GenerateFeedback's feedback) is nbconvert's HTMLExporter with this config.
# SanitizeHTML (an nbconvert preprocessor, run first): markdown and raw cells and HTML/markdown
# outputs through bleach with the tags below, JavaScript, widget and SVG outputs dropped
# (formgrader's own template renders markdown cells unsanitized: this covers them); sanitize_html:
# the template's own clean_html over every HTML output again (it keeps table/tr/td, shows th/thead
# as text). PNG plots and text stay; links keep http(s)/mailto only; no attribute that could load
# or run anything (img src, style, on*) is kept: nothing in a student's output reaches the server.
# (core/preprocessors/active_html.py flags such a submission for review; tests/test_formgrader.py.)
c.HTMLExporter.sanitize_html = True
c.HTMLExporter.preprocessors = ["nbconvert.preprocessors.sanitize.SanitizeHTML"]
c.SanitizeHTML.tags = ["a", "abbr", "b", "blockquote", "br", "code", "div", "em", "h1", "h2", "h3", "h4", "h5",
                       "h6", "hr", "i", "li", "ol", "p", "pre", "span", "strong", "sub", "sup", "table", "tbody",
                       "td", "th", "thead", "tr", "ul"]
c.SanitizeHTML.attributes = {"a": ["href", "title"], "abbr": ["title"], "*": ["class"]}

c.ClearSolutions.code_stub = {"python": "# YOUR CODE HERE\nraise NotImplementedError()"}
c.ClearSolutions.enforce_metadata = True
