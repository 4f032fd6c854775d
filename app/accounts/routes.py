"""Routes the SDK's VectorStoreCatalog, GoogleDriveClient and BrowserEnvironment's sign-in call: each a clear 404
{error, message}."""
from flask.views import MethodView

from ..auth import require_api_key
from ..errors import ApiError
from ..parsing import Blueprint
from ..ratelimits import requests_limit

blp = Blueprint("outside-accounts", __name__, url_prefix="/fast/v2",
                description="Vector stores, Google Drive and the Narada sign-in: they need outside accounts this "
                            "service cannot reach.")
blp.before_request(require_api_key)

VECTOR_STORES = ("This service has no Agent Studio vector stores: they live in Narada's cloud, which it does not "
                 "reach. Give the agent the documents as task attachments instead (POST /fast/v2/files).")
DRIVE = ("Google Drive is not reachable from this service (it has no internet access and no Google account): "
         "download the file yourself and upload it (POST /fast/v2/files) to use it in a task.")

SIGN_IN = ("BrowserEnvironment signs a local Chrome into Narada's cloud with a custom token; this service has no "
           "Narada accounts to sign in to. Use RemoteBrowserEnvironment(browser_window_id=...) with this service's "
           "extension in your browser, or CloudBrowserEnvironment for a browser here (docs/sdk.md).")


def _unavailable(message):
    raise ApiError(404, "Not Available", message)


@blp.route("/agent-studio/vector-stores")
class VectorStores(MethodView):
    @requests_limit
    @blp.alt_response(401, schema="Error", description="Invalid API key")
    @blp.alt_response(404, schema="Error", description="Vector stores are not offered here")
    def get(self):
        """Vector stores (VectorStoreCatalog.list): not offered here

        Always 404 `Not Available`: the SDK raises it as a NaradaError naming the reason.
        """
        _unavailable(VECTOR_STORES)


@blp.route("/agent-studio/vector-stores/by-path")
class VectorStoreByPath(MethodView):
    @requests_limit
    @blp.alt_response(401, schema="Error", description="Invalid API key")
    @blp.alt_response(404, schema="Error", description="No such vector store: none exist here")
    def get(self):
        """A vector store by path (VectorStoreCatalog.get): none exist here

        Always 404: the SDK's get() returns None.
        """
        _unavailable(VECTOR_STORES)


@blp.route("/agent-studio/vector-stores/<string:store_id>")
class VectorStore(MethodView):
    @requests_limit
    @blp.alt_response(401, schema="Error", description="Invalid API key")
    @blp.alt_response(404, schema="Error", description="No such vector store: none exist here")
    def get(self, store_id):
        """A vector store by id (VectorStoreCatalog.get): none exist here

        Always 404: the SDK's get() returns None.
        """
        _unavailable(VECTOR_STORES)


@blp.route("/google/drive/list-files")
class DriveList(MethodView):
    @requests_limit
    @blp.alt_response(401, schema="Error", description="Invalid API key")
    @blp.alt_response(404, schema="Error", description="Google Drive is not reachable from here")
    def post(self):
        """List a Drive folder (GoogleDriveClient.list_files): not reachable here

        Always 404 `Not Available`: the SDK raises it as a NaradaError naming the reason.
        """
        _unavailable(DRIVE)


@blp.route("/google/drive/download-file")
class DriveDownload(MethodView):
    @requests_limit
    @blp.alt_response(401, schema="Error", description="Invalid API key")
    @blp.alt_response(404, schema="Error", description="Google Drive is not reachable from here")
    def post(self):
        """Download a Drive file (GoogleDriveClient.download_file): not reachable here

        Always 404 `Not Available`: the SDK raises it as a NaradaError naming the reason.
        """
        _unavailable(DRIVE)


@blp.route("/auth/custom-token")
class CustomToken(MethodView):
    @requests_limit
    @blp.alt_response(401, schema="Error", description="Invalid API key")
    @blp.alt_response(404, schema="Error", description="No Narada sign-in here")
    def get(self):
        """A Narada sign-in token (the SDK's BrowserEnvironment): not offered here

        Always 404 `Not Available`: the SDK raises it as a NaradaInitializationError naming the environments
        that work here.
        """
        _unavailable(SIGN_IN)
