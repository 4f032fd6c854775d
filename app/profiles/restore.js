// Run by every new document before the page's own scripts (Page.addScriptToEvaluateOnNewDocument), with one saved
// origin's state: on a document of that origin, its localStorage while the origin's is empty, and each saved IndexedDB
// database the origin does not have. The database is created in the versionchange transaction of an open request made
// before any of the page's: the page's own open of that name waits for it, and finds the records there. A database the
// origin has already (oldVersion > 0) or has at a higher version is left as it is. Once per tab and origin (a mark in
// the tab's sessionStorage, which profiles do not save): a page that signs out by deleting them does not find them
// written again on its next document.
(function (origin, data) {
  if (location.origin !== origin) return;
  var MARK = '__remoteDispatchProfile';
  try {
    if (sessionStorage.getItem(MARK)) return;
    sessionStorage.setItem(MARK, '1');
  } catch (e) {}
  var TAG = '$rd:t', saved = JSON.parse(data);

  function bytes(text) {
    var binary = atob(text), out = new Uint8Array(binary.length);
    for (var i = 0; i < binary.length; i++) out[i] = binary.charCodeAt(i);
    return out.buffer;
  }

  function decode(value) {
    if (Array.isArray(value)) return value.map(decode);
    if (value === null || typeof value !== 'object') return value;
    var kind = value[TAG], out;
    if (kind === undefined || kind === 'Object') {
      var fields = kind === undefined ? value : value.v;
      out = {};
      Object.keys(fields).forEach(function (key) { out[key] = decode(fields[key]); });
      return out;
    }
    if (kind === 'number') return Number(value.v);
    if (kind === 'undefined') return undefined;
    if (kind === 'bigint') return BigInt(value.v);
    if (kind === 'Date') return new Date(value.v === null ? NaN : value.v);
    if (kind === 'RegExp') return new RegExp(value.v, value.flags);
    if (kind === 'ArrayBuffer') return bytes(value.v);
    if (kind === 'Blob') return new Blob([bytes(value.v)], {type: value.type});
    if (kind === 'File') return new File([bytes(value.v)], value.name, {type: value.type, lastModified: value.lastModified});
    if (kind === 'Map') return new Map(value.v.map(function (e) { return [decode(e[0]), decode(e[1])]; }));
    if (kind === 'Set') return new Set(value.v.map(decode));
    if (kind === 'DataView') return new DataView(bytes(value.v));
    return new self[kind](bytes(value.v));  // a typed array: Uint8Array, Float64Array ...
  }

  function create(database, stores) {
    stores.forEach(function (saved) {
      var store = database.createObjectStore(saved.name, {keyPath: saved.keyPath, autoIncrement: saved.autoIncrement});
      saved.indexes.forEach(function (index) {
        store.createIndex(index.name, index.keyPath, {unique: index.unique, multiEntry: index.multiEntry});
      });
      saved.records.forEach(function (record) {
        if (saved.keyPath === null) store.put(decode(record[1]), decode(record[0]));
        else store.put(decode(record[1]));
      });
    });
  }

  try {
    if ((saved.local || []).length && !localStorage.length) {
      saved.local.forEach(function (item) { localStorage.setItem(item[0], item[1]); });
    }
  } catch (e) {}
  (saved.indexedDB || []).forEach(function (database) {
    try {
      var opening = indexedDB.open(database.name, database.version);
      opening.onupgradeneeded = function (event) {
        if (event.oldVersion) opening.transaction.abort();
        else create(opening.result, database.stores);
      };
      opening.onsuccess = function () { opening.result.close(); };
      opening.onerror = function (event) { event.preventDefault(); };
    } catch (e) {}
  });
})
