"""Shadow traffic: answer clients from the primary server, replay each request on a candidate
asynchronously, and record both answers as a run-record pair for ``servediff compare``.

    servediff shadow --primary http://a:8000 --candidate http://b:8000 --listen 127.0.0.1:9000 --out shadow/

``request`` parses one mirrored request, ``proxy`` relays to the primary, ``mirror`` replays on the
candidate (bounded queue, fixed workers), ``recorder`` writes the records, ``session`` runs it all.
"""
