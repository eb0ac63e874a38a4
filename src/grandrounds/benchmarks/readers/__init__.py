"""Reading benchmark files in their original formats, with errors that name the file and line or record.

One module per job: :mod:`.decoding` (text encodings, GB18030 detection, a file's text and lines,
the file checks), :mod:`.lines` (JSON Lines and CSV, whole or a record at a time),
:mod:`.json_docs` (JSON documents, whole or an item at a time with ijson),
:mod:`.json_object_arrays` (an object of arrays, an item at a time, decoded by json itself),
:mod:`.records` (required fields, unique ids), :mod:`.exam_options` (an exam record's options
lettered A.. and its key among them) and :mod:`.xlsx` (xlsx workbooks without their
shared-strings table in memory).
"""
