"""A trivial JSON endpoint (bare Flask): the baseline the submit endpoint is compared with."""
import uuid

from flask import Flask, jsonify, request

app = Flask("bench_trivial")


@app.route("/trivial", methods=["GET", "POST"])
@app.route("/bench/trivial", methods=["GET", "POST"])
def trivial():
    """Parse the JSON body and answer a small JSON document, as submit does, with no other work."""
    request.get_json(silent=True)
    return jsonify(requestId=str(uuid.uuid4())), 202 if request.method == "POST" else 200
